#include "server/rpc/rate_limiter.h"

#include <gtest/gtest.h>

namespace plexus {
namespace {

TEST(RateLimiterTest, BurstThenSteadyRatePerClient) {
  ManualClock clock;
  RateLimiter limiter(/*rate_per_s=*/2, /*burst=*/3, &clock);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.Allow("a")) << i;
  EXPECT_FALSE(limiter.Allow("a"));
  EXPECT_EQ(limiter.RetryAfterMs("a"), 500);
  EXPECT_TRUE(limiter.Allow("b"));  // buckets are per client
  clock.AdvanceMs(500);
  EXPECT_TRUE(limiter.Allow("a"));
  EXPECT_FALSE(limiter.Allow("a"));
  clock.AdvanceMs(60000);  // refills up to the burst, no further
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.Allow("a")) << i;
  EXPECT_FALSE(limiter.Allow("a"));
}

TEST(RateLimiterTest, ZeroRateMeansNoLimit) {
  ManualClock clock;
  RateLimiter limiter(0, 1, &clock);
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(limiter.Allow("a"));
}

}  // namespace
}  // namespace plexus
