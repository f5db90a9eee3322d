// RateLimiter: a token bucket per client. Each client may make `rate_per_s` requests per second
// on average and bursts of up to `burst`; time comes from the injected Clock. A rate of 0 lets
// everything through. Thread-compatible (the server calls it under its lock).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/clock.h"

namespace plexus {

class RateLimiter {
 public:
  RateLimiter(double rate_per_s, double burst, const Clock* clock) : rate_(rate_per_s), burst_(burst), clock_(clock) {}

  // True if `client` may make a request now; the request is then counted.
  bool Allow(const std::string& client);
  // Milliseconds until `client` may make its next request (0 when it may now).
  int64_t RetryAfterMs(const std::string& client) const;

 private:
  struct Bucket {
    double tokens = 0;
    int64_t updated_ms = 0;
  };
  double Refilled(const Bucket& b, int64_t now) const;

  const double rate_, burst_;
  const Clock* const clock_;
  std::map<std::string, Bucket> buckets_;
};

}  // namespace plexus
