// FixedPoint: a sum of encoded vectors decodes to the sum of the clipped values within the stated
// bound (inputs × step), the rounding is unbiased (the mean error over many values is near 0, not
// half a step), values outside the range are clipped, and the widest sum does not wrap.
#include "privacy/fixed_point.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

Secret32 Seed(uint8_t b) {
  Secret32 s{};
  s[0] = b;
  return s;
}

TEST(FixedPointTest, SumsDecodeWithinTheRoundingBound) {
  const int inputs = 50;
  const size_t n = 10000;
  FixedPoint fp = *FixedPoint::Create(0.5, 1000);
  Rng rng(1);
  std::vector<double> truth(n, 0.0);
  std::vector<uint32_t> sum(n, 0), encoded(n);
  for (int k = 0; k < inputs; ++k) {
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) {
      x[i] = static_cast<float>(rng.Normal() * 0.3);  // some beyond the range: clipped
      truth[i] += std::clamp(static_cast<double>(x[i]), -0.5, 0.5);
    }
    ASSERT_OK(fp.Encode(x, Seed(static_cast<uint8_t>(k)), encoded));
    for (size_t i = 0; i < n; ++i) sum[i] += encoded[i];
  }
  std::vector<double> decoded(n);
  ASSERT_OK(fp.DecodeSum(sum, inputs, decoded));
  double mean_error = 0, worst = 0;
  for (size_t i = 0; i < n; ++i) {
    mean_error += (decoded[i] - truth[i]) / n;
    worst = std::max(worst, std::abs(decoded[i] - truth[i]));
  }
  EXPECT_LE(worst, inputs * fp.step());
  // Unbiased: the sum of n·inputs independent roundings, each of variance at most step²/4.
  EXPECT_LT(std::abs(mean_error), 5 * fp.step() / 2 * std::sqrt(static_cast<double>(inputs) / n));
}

TEST(FixedPointTest, TheWidestSumDoesNotWrap) {
  FixedPoint fp = *FixedPoint::Create(1, 3);
  std::vector<float> top(4, 1.0f), bottom(4, -1.0f);
  std::vector<uint32_t> a(4), sum(4, 0);
  for (int k = 0; k < 3; ++k) {
    ASSERT_OK(fp.Encode(top, Seed(1), a));
    for (size_t i = 0; i < 4; ++i) sum[i] += a[i];
  }
  std::vector<double> out(4);
  ASSERT_OK(fp.DecodeSum(sum, 3, out));
  for (double v : out) EXPECT_NEAR(v, 3.0, 1e-6);
  ASSERT_OK(fp.Encode(bottom, Seed(2), a));
  ASSERT_OK(fp.DecodeSum(a, 1, out));
  for (double v : out) EXPECT_NEAR(v, -1.0, 1e-6);
  EXPECT_THAT(fp.DecodeSum(sum, 4, out), StatusIs(StatusCode::kInvalidArgument, "at most 3"));
  EXPECT_THAT(FixedPoint::Create(0, 3).status(), StatusIs(StatusCode::kInvalidArgument, "range"));
  EXPECT_THAT(FixedPoint::Create(1, 0).status(), StatusIs(StatusCode::kInvalidArgument, "at least one"));
}

}  // namespace
}  // namespace plexus
