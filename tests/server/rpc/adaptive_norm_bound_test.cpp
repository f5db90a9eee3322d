#include "server/rpc/adaptive_norm_bound.h"

#include <gtest/gtest.h>

#include <cmath>

namespace plexus {
namespace {

TEST(AdaptiveNormBoundTest, StartsFromTheModelNormThenFollowsTheMedianOfRecentUpdates) {
  AdaptiveNormBound bound(10, /*window=*/5, /*min_samples=*/3);
  EXPECT_DOUBLE_EQ(bound.Bound(2.0), 20.0);   // nothing accepted yet: 10 x the model's norm
  EXPECT_TRUE(std::isinf(bound.Bound(0.0)));  // a zero model says nothing
  bound.Accepted(1.0);
  bound.Accepted(3.0);
  EXPECT_DOUBLE_EQ(bound.Bound(2.0), 20.0);
  bound.Accepted(2.0);
  EXPECT_DOUBLE_EQ(bound.Bound(100.0), 20.0);  // median of {1, 3, 2}
  // The window keeps the last five: old norms stop counting.
  for (int i = 0; i < 5; ++i) bound.Accepted(0.5);
  EXPECT_DOUBLE_EQ(bound.Bound(100.0), 5.0);
  bound.Accepted(NAN);  // ignored
  EXPECT_DOUBLE_EQ(bound.Bound(100.0), 5.0);
}

TEST(AdaptiveNormBoundTest, AFactorOfZeroTurnsItOff) {
  AdaptiveNormBound bound(0);
  EXPECT_FALSE(bound.enabled());
  bound.Accepted(1.0);
  EXPECT_TRUE(std::isinf(bound.Bound(1.0)));
}

}  // namespace
}  // namespace plexus
