#include "core/rng.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

namespace plexus {
namespace {

TEST(RngTest, SameSeedSameStream) {
  Rng a(42), b(42), c(43);
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.NextU64();
    EXPECT_EQ(x, b.NextU64());
    EXPECT_NE(x, c.NextU64());
  }
}

TEST(RngTest, UniformAndBelowStayInRange) {
  Rng r(1);
  for (int i = 0; i < 10000; ++i) {
    const double u = r.Uniform();
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
    EXPECT_LT(r.Below(7), 7u);
  }
}

TEST(RngTest, GammaHasTheRightMean) {
  for (double shape : {0.3, 1.0, 4.0}) {
    Rng r(7);
    double sum = 0;
    const int n = 20000;
    for (int i = 0; i < n; ++i) sum += r.Gamma(shape);
    EXPECT_NEAR(sum / n, shape, 0.05 * shape + 0.02) << shape;
  }
}

TEST(RngTest, ShuffleIsAPermutation) {
  std::vector<int> v(50);
  std::iota(v.begin(), v.end(), 0);
  Rng r(3);
  r.Shuffle(std::span<int>(v));
  EXPECT_FALSE(std::is_sorted(v.begin(), v.end()));
  std::sort(v.begin(), v.end());
  for (int i = 0; i < 50; ++i) EXPECT_EQ(v[i], i);
}

TEST(RngTest, DerivedStreamsDiffer) {
  EXPECT_NE(Rng::Derive(5, 1).NextU64(), Rng::Derive(5, 2).NextU64());
  EXPECT_EQ(Rng::Derive(5, 1).NextU64(), Rng::Derive(5, 1).NextU64());
}

}  // namespace
}  // namespace plexus
