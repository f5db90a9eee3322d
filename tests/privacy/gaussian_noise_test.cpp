#include "privacy/gaussian_noise.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace plexus {
namespace {

// The Kolmogorov–Smirnov distance between the samples and the standard normal.
double KsDistance(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  const double n = static_cast<double>(samples.size());
  double d = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    const double cdf = 0.5 * std::erfc(-samples[i] / std::sqrt(2.0));
    d = std::max({d, cdf - static_cast<double>(i) / n, static_cast<double>(i + 1) / n - cdf});
  }
  return d;
}

// The ziggurat's draws are standard normals: the whole distribution (Kolmogorov–Smirnov at the
// 1e-6 level: 2.69/√n), the tail beyond the ziggurat's base (drawn by its own rejection loop) and
// the wedges (the fourth moment, 3 for a normal, which a wrong wedge would move).
TEST(GaussianNoiseTest, DrawsStandardNormals) {
  const size_t n = 1 << 20;
  for (auto& noise : {MakeSeededGaussianNoise(11), MakeSecureGaussianNoise()}) {
    std::vector<double> x(n, 0.0);
    ASSERT_TRUE(noise->Add(x, 1.0).ok());
    EXPECT_LT(KsDistance(x), 2.69 / std::sqrt(static_cast<double>(n))) << noise->Describe();
    double sum = 0, m2 = 0, m4 = 0;
    const double r = 3.6541528853610088;
    size_t tail = 0;
    double tail_sum = 0;
    for (double v : x) {
      sum += v;
      m2 += v * v;
      m4 += v * v * v * v;
      if (std::abs(v) > r) {
        ++tail;
        tail_sum += std::abs(v);
      }
    }
    const double dn = static_cast<double>(n);
    EXPECT_NEAR(sum / dn, 0, 5 / std::sqrt(dn)) << noise->Describe();
    EXPECT_NEAR(m2 / dn, 1, 5 * std::sqrt(2 / dn)) << noise->Describe();
    EXPECT_NEAR(m4 / dn, 3, 5 * std::sqrt(96 / dn)) << noise->Describe();
    const double p_tail = std::erfc(r / std::sqrt(2.0));  // both sides
    EXPECT_NEAR(static_cast<double>(tail), p_tail * dn, 5 * std::sqrt(p_tail * dn)) << noise->Describe();
    // Beyond r: mean λ = φ(r)/(1 − Φ(r)), variance 1 + rλ − λ².
    const double lambda = std::exp(-r * r / 2) / std::sqrt(2 * M_PI) / (p_tail / 2);
    const double tail_sd = std::sqrt((1 + r * lambda - lambda * lambda) / static_cast<double>(tail));
    EXPECT_NEAR(tail_sum / static_cast<double>(tail), lambda, 5 * tail_sd) << noise->Describe();
  }
}

// A keyed stream gives the same numbers for the same key and stream, whatever the thread count,
// so that −scale takes back what +scale added; another stream or key gives other numbers.
TEST(GaussianNoiseTest, KeyedStreamsRepeatAndTakeBack) {
  const size_t n = 3 * (1 << 14) + 5;  // more than one block, and a partial one
  const NoiseKey key = NoiseKeyFromSeed(7, "test");
  ThreadPool pool(2);
  std::vector<double> alone(n, 0.0), pooled(n, 0.0), other(n, 0.0), other_key(n, 0.0);
  ASSERT_TRUE(AddKeyedNormals(alone, 2.0, key, 5).ok());
  ASSERT_TRUE(AddKeyedNormals(pooled, 2.0, key, 5, &pool).ok());
  EXPECT_EQ(alone, pooled);
  ASSERT_TRUE(AddKeyedNormals(other, 2.0, key, 6).ok());
  ASSERT_TRUE(AddKeyedNormals(other_key, 2.0, NoiseKeyFromSeed(8, "test"), 5).ok());
  size_t same = 0;
  for (size_t i = 0; i < n; ++i) same += (alone[i] == other[i]) + (alone[i] == other_key[i]);
  EXPECT_EQ(same, 0u);
  ASSERT_TRUE(AddKeyedNormals(pooled, -2.0, key, 5, &pool).ok());
  EXPECT_EQ(pooled, std::vector<double>(n, 0.0));
  ASSERT_TRUE(NewNoiseKey().ok());
  EXPECT_NE(*NewNoiseKey(), *NewNoiseKey());
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
