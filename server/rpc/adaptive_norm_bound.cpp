#include "server/rpc/adaptive_norm_bound.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace plexus {

double AdaptiveNormBound::Bound(double model_norm) const {
  constexpr double kNone = std::numeric_limits<double>::infinity();
  if (!enabled()) return kNone;
  if (recent_.size() < min_samples_) return model_norm > 0 && std::isfinite(model_norm) ? factor_ * model_norm : kNone;
  std::vector<double> sorted(recent_.begin(), recent_.end());
  const auto mid = sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2);
  std::nth_element(sorted.begin(), mid, sorted.end());
  // An all-zero history (clients that did not move) says nothing about the next update's size.
  return *mid > 0 ? factor_ * *mid : (model_norm > 0 ? factor_ * model_norm : kNone);
}

void AdaptiveNormBound::Accepted(double norm) {
  if (!enabled() || !std::isfinite(norm)) return;
  recent_.push_back(norm);
  if (recent_.size() > window_) recent_.pop_front();
}

}  // namespace plexus
