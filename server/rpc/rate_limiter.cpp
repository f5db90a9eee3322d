#include "server/rpc/rate_limiter.h"

#include <algorithm>
#include <cmath>

namespace plexus {

double RateLimiter::Refilled(const Bucket& b, int64_t now) const {
  return std::min(burst_, b.tokens + static_cast<double>(now - b.updated_ms) * rate_ / 1000.0);
}

bool RateLimiter::Allow(const std::string& client) {
  if (rate_ <= 0) return true;
  const int64_t now = clock_->NowMs();
  auto [it, fresh] = buckets_.try_emplace(client, Bucket{burst_, now});
  Bucket& b = it->second;
  b.tokens = Refilled(b, now);
  b.updated_ms = now;
  if (b.tokens < 1.0) return false;
  b.tokens -= 1.0;
  return true;
}

int64_t RateLimiter::RetryAfterMs(const std::string& client) const {
  auto it = buckets_.find(client);
  if (rate_ <= 0 || it == buckets_.end()) return 0;
  const double tokens = Refilled(it->second, clock_->NowMs());
  return tokens >= 1.0 ? 0 : static_cast<int64_t>(std::ceil((1.0 - tokens) * 1000.0 / rate_));
}

}  // namespace plexus
