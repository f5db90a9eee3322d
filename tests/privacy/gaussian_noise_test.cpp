#include "privacy/gaussian_noise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace plexus {
namespace {

double Norm(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s);
}

// Local DP's mechanism: an update longer than the clip comes out with the clip's norm and its
// direction, a shorter one unchanged; then noise of standard deviation z·C per value (a
// chi-square test over many values).
TEST(ClipAndAddNoiseTest, ClipsThenAddsNoiseOfTheStatedVariance) {
  auto noise = MakeSeededGaussianNoise(3);
  std::vector<float> longer{3, 4};
  ASSERT_TRUE(ClipAndAddNoise(longer, 1, 0, *noise).ok());
  EXPECT_FLOAT_EQ(longer[0], 0.6f);
  EXPECT_FLOAT_EQ(longer[1], 0.8f);
  std::vector<float> shorter{0.3f, 0.4f};
  ASSERT_TRUE(ClipAndAddNoise(shorter, 1, 0, *noise).ok());
  EXPECT_EQ(shorter, (std::vector<float>{0.3f, 0.4f}));

  const size_t n = 40000;
  std::vector<float> zeros(n, 0.0f);
  ASSERT_TRUE(ClipAndAddNoise(zeros, 0.5, 2, *noise).ok());  // stddev 1
  double chi2 = 0;
  for (float x : zeros) chi2 += static_cast<double>(x) * x;
  EXPECT_NEAR(chi2, static_cast<double>(n), 5 * std::sqrt(2.0 * n));
  auto secure = MakeSecureGaussianNoise();
  std::vector<float> big(n, 1.0f);  // norm 200, clipped to 2: each value 0.01, plus noise of stddev 3
  ASSERT_TRUE(ClipAndAddNoise(big, 2, 1.5, *secure).ok());
  double dev = 0;
  for (float x : big) dev += (x - 0.01) * (x - 0.01) / 9.0;
  EXPECT_NEAR(dev, static_cast<double>(n), 5 * std::sqrt(2.0 * n));
}

TEST(ClipAndAddNoiseTest, RefusesWhatCannotBeMadePrivate) {
  auto noise = MakeSeededGaussianNoise(1);
  std::vector<float> v{1, 2};
  EXPECT_EQ(ClipAndAddNoise(v, 0, 1, *noise).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ClipAndAddNoise(v, 1, -1, *noise).code(), StatusCode::kInvalidArgument);
  std::vector<float> bad{1, NAN};
  EXPECT_EQ(ClipAndAddNoise(bad, 1, 1, *noise).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(v, (std::vector<float>{1, 2}));
  EXPECT_TRUE(std::isnan(bad[1]));
}

}  // namespace
}  // namespace plexus
