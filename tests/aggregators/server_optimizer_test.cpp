#include "aggregators/server_optimizer.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace plexus {
namespace {

// More values than one of ForRanges' ranges, and not a multiple of any vector width, so that the
// vector loop, its tail and the split across threads all run.
constexpr size_t kParams = 40'003;

ModelState Model(size_t n, std::mt19937& rng) {
  ModelState m = *ModelState::Create({{"w", {static_cast<int64_t>(n)}}});
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (float& x : m.data()) x = d(rng);
  return m;
}

// Sums whose mean (scale 1) has every sign relation to the moments' start tau^2: some values equal
// to tau (g^2 == v, Yogi's sign 0), some below it and some far above.
std::vector<double> Sum(size_t n, double tau, std::mt19937& rng) {
  std::vector<double> s(n);
  std::uniform_real_distribution<double> d(-2.0, 2.0);
  for (size_t j = 0; j < n; ++j) {
    switch (j % 4) {
      case 0:
        s[j] = (j % 8 == 0) ? tau : -tau;
        break;
      case 1:
        s[j] = d(rng) * tau * 0.5;
        break;
      default:
        s[j] = d(rng);
    }
  }
  return s;
}

std::string Pack(const char* tag, const std::vector<double>& m, const std::vector<double>& v) {
  std::string out = std::string(tag) + "\n";
  const uint64_t n = m.size();
  out.append(reinterpret_cast<const char*>(&n), sizeof n);
  out.append(reinterpret_cast<const char*>(m.data()), n * sizeof(double));
  out.append(reinterpret_cast<const char*>(v.data()), n * sizeof(double));
  return out;
}

// The FedOpt step as its definition reads, one value at a time, each product rounded on its own
// (volatile: never fused into a multiply-add), with the sign as a branch.
void ReferenceStep(AdaptiveKind kind, double lr, double b1, double b2, double tau, const ModelState& base,
                   const std::vector<double>& sum, double scale, std::vector<double>& m, std::vector<double>& v,
                   std::vector<float>& x) {
  x.resize(sum.size());
  for (size_t j = 0; j < sum.size(); ++j) {
    volatile double g = scale * sum[j];
    volatile double g2 = g * g;
    volatile double m1 = b1 * m[j];
    volatile double m2 = (1.0 - b1) * g;
    m[j] = m1 + m2;
    if (kind == AdaptiveKind::kAdagrad) {
      v[j] = v[j] + g2;
    } else if (kind == AdaptiveKind::kAdam) {
      volatile double v1 = b2 * v[j];
      volatile double v2 = (1.0 - b2) * g2;
      v[j] = v1 + v2;
    } else {
      double sign = 0.0;
      if (v[j] > g2) {
        sign = 1.0;
      } else if (v[j] < g2) {
        sign = -1.0;
      }
      volatile double step = (1.0 - b2) * g2;
      volatile double signed_step = step * sign;
      v[j] = v[j] - signed_step;
    }
    volatile double num = lr * m[j];
    volatile double den = std::sqrt(v[j]) + tau;
    volatile double q = num / den;
    x[j] = static_cast<float>(static_cast<double>(base.data()[j]) + q);
  }
}

void ExpectSameBits(std::span<const float> got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  size_t differing = 0, first = 0;
  for (size_t j = 0; j < want.size(); ++j) {
    if (std::bit_cast<uint32_t>(got[j]) != std::bit_cast<uint32_t>(want[j])) {
      if (differing++ == 0) first = j;
    }
  }
  EXPECT_EQ(differing, 0u) << "first at " << first << ": " << got[first] << " against " << want[first];
}

class AdaptiveStepTest : public ::testing::TestWithParam<std::tuple<AdaptiveKind, bool>> {};

// The step's loop is written for the vectorizer (one loop per kind, rates in locals, sqrt without
// errno); every value of the model and of both moments must keep the bits of the definition, over
// three rounds, on one thread and on two.
TEST_P(AdaptiveStepTest, EveryValueHasTheBitsOfTheDefinition) {
  const auto [kind, threaded] = GetParam();
  const double lr = 0.03, b1 = 0.9, b2 = 0.99, tau = 1e-3;
  const char* tag = kind == AdaptiveKind::kAdagrad ? "plexus.fedadagrad.v1"
                    : kind == AdaptiveKind::kAdam  ? "plexus.fedadam.v1"
                                                   : "plexus.fedyogi.v1";
  std::unique_ptr<ServerOptimizer> step = MakeAdaptiveStep(kind, lr, b1, b2, tau);
  ThreadPool pool(2);
  std::mt19937 rng(7);
  ModelState base = Model(kParams, rng);
  std::vector<double> m(kParams, 0.0), v(kParams, tau * tau);
  std::vector<float> want;
  for (int round = 0; round < 3; ++round) {
    const std::vector<double> sum = Sum(kParams, tau, rng);
    const double scale = round == 0 ? 1.0 : 0.25;  // round 0 hits g^2 == tau^2 exactly
    ReferenceStep(kind, lr, b1, b2, tau, base, sum, scale, m, v, want);
    ModelState out = step->Step(base, sum, scale, threaded ? &pool : nullptr);
    EXPECT_EQ(out.version(), base.version() + 1);
    ExpectSameBits(out.data(), want);
    EXPECT_TRUE(step->SaveState() == Pack(tag, m, v)) << "the moments differ in round " << round;
    base = std::move(out);
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, AdaptiveStepTest,
                         ::testing::Combine(::testing::Values(AdaptiveKind::kAdagrad, AdaptiveKind::kAdam,
                                                              AdaptiveKind::kYogi),
                                            ::testing::Bool()));

// DeMo's sign step: 1, -1 or 0 (for zeros of either sign and NaN) times the rate.
TEST(SignStepTest, EveryValueMovesByTheRateTimesTheSignOfTheSum) {
  const double lr = 0.125;
  std::unique_ptr<ServerOptimizer> step = MakeSignStep(lr);
  std::mt19937 rng(3);
  ModelState base = Model(kParams, rng);
  std::vector<double> sum(kParams);
  const double specials[] = {0.0,    -0.0,    std::numeric_limits<double>::quiet_NaN(),
                             1e-300, -1e-300, std::numeric_limits<double>::infinity()};
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  for (size_t j = 0; j < kParams; ++j) sum[j] = j % 3 == 0 ? specials[(j / 3) % 6] : d(rng);
  std::vector<float> want(kParams);
  for (size_t j = 0; j < kParams; ++j) {
    const double sign = sum[j] > 0 ? 1.0 : sum[j] < 0 ? -1.0 : 0.0;
    want[j] = static_cast<float>(static_cast<double>(base.data()[j]) + lr * sign);
  }
  ThreadPool pool(2);
  ExpectSameBits(step->Step(base, sum, 0.5, nullptr).data(), want);
  ExpectSameBits(step->Step(base, sum, 0.5, &pool).data(), want);
}

}  // namespace
}  // namespace plexus
