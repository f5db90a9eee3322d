#include "gossip/protocol/neighbour_merge.h"

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "tests/testing/status_matchers.h"
#include "tests/testing/vector_model.h"

namespace plexus::gossip {
namespace {

ModelState Vector(const std::vector<float>& values) { return ::plexus::testing::VectorModel(values); }

ModelState MergeWith(const std::string& spec, const ModelState& self, double self_weight,
                     const std::vector<std::pair<ModelState, double>>& neighbours, uint64_t round = 0) {
  auto merge = MakeNeighbourMerge(spec);
  EXPECT_OK(merge.status());
  std::vector<WeightedModel> in;
  for (const auto& [m, w] : neighbours) in.push_back({&m, w});
  Result<ModelState> out = (*merge)->Merge(self, self_weight, in, round, 10);
  EXPECT_OK(out.status());
  return std::move(out).value();
}

TEST(NeighbourMergeTest, MeanUsesTheMixingWeights) {
  ModelState out = MergeWith("mean", Vector({0, 10}), 0.5, {{Vector({4, 0}), 0.25}, {Vector({8, 0}), 0.25}});
  EXPECT_FLOAT_EQ(out.data()[0], 3.0f);
  EXPECT_FLOAT_EQ(out.data()[1], 5.0f);
}

// The mean rounds each product to float and adds them in order (own model first, then each
// neighbour as given), with no fused multiply-add: its bits are the same on every CPU and for every
// way of walking the model (three blocks of the merge's loop and a tail here), with no
// neighbour, one, and three.
TEST(NeighbourMergeTest, MeanRoundsEachProductAndAddsInOrder) {
  constexpr size_t kValues = 3 * 4096 + 77;
  auto values = [](float scale) {
    std::vector<float> v(kValues);
    for (size_t k = 0; k < kValues; ++k) v[k] = scale * std::sin(static_cast<float>(k) * 0.37f + scale);
    return v;
  };
  const std::vector<std::vector<float>> models = {values(1.3f), values(-0.7f), values(2.9f), values(0.11f)};
  const std::vector<double> weights = {0.3, 0.2, 0.1, 0.4};
  for (size_t neighbours : {0u, 1u, 3u}) {
    std::vector<std::pair<ModelState, double>> in;
    for (size_t j = 1; j <= neighbours; ++j) in.emplace_back(Vector(models[j]), weights[j]);
    const ModelState out = MergeWith("mean", Vector(models[0]), weights[0], in);
    ASSERT_EQ(out.data().size(), kValues);
    size_t differing = 0;
    for (size_t k = 0; k < kValues; ++k) {
      volatile float sum = static_cast<float>(weights[0]) * models[0][k];  // volatile: rounded, never fused
      for (size_t j = 1; j <= neighbours; ++j) {
        volatile float product = static_cast<float>(weights[j]) * models[j][k];
        sum = sum + product;
      }
      if (std::bit_cast<uint32_t>(out.data()[k]) != std::bit_cast<uint32_t>(static_cast<float>(sum))) ++differing;
    }
    EXPECT_EQ(differing, 0u) << neighbours << " neighbours";
  }
}

TEST(NeighbourMergeTest, ClippedGossipBoundsEachNeighboursPull) {
  // The liar at distance 1000 pulls by at most tau = 1 (times its weight 1/3).
  ModelState out =
      MergeWith("clipped:tau=1", Vector({0}), 1.0 / 3, {{Vector({0.5}), 1.0 / 3}, {Vector({1000}), 1.0 / 3}});
  EXPECT_NEAR(out.data()[0], 0.5 / 3 + 1.0 / 3, 1e-5);
  // Adaptive: tau is the lower median of the distances {0.5, 1000}, 0.5.
  ModelState adaptive =
      MergeWith("clipped", Vector({0}), 1.0 / 3, {{Vector({0.5}), 1.0 / 3}, {Vector({1000}), 1.0 / 3}});
  EXPECT_NEAR(adaptive.data()[0], 1.0 / 3, 1e-5);
}

TEST(NeighbourMergeTest, BalanceAcceptsOnlyNeighboursCloseToItsOwnModel) {
  // ||self|| = 10: gamma 0.5 at round 0 accepts within 5.
  ModelState out = MergeWith("balance:gamma=0.5,kappa=1,alpha=0.5", Vector({10}), 0.5,
                             {{Vector({12}), 0.25}, {Vector({-90}), 0.25}});
  EXPECT_NEAR(out.data()[0], 0.5 * 10 + 0.5 * 12, 1e-5);
  // Nobody close enough: the node keeps its own model.
  ModelState alone = MergeWith("balance", Vector({10}), 0.5, {{Vector({100}), 0.5}});
  EXPECT_FLOAT_EQ(alone.data()[0], 10.0f);
}

TEST(NeighbourMergeTest, RegistryStrategiesRunOverSelfAndNeighbours) {
  ModelState out =
      MergeWith("median", Vector({1}), 0.25, {{Vector({2}), 0.25}, {Vector({3}), 0.25}, {Vector({1e6}), 0.25}});
  EXPECT_NEAR(out.data()[0], 2.5, 1e-4);  // the median of {1, 2, 3, 1e6}
}

TEST(NeighbourMergeTest, UnknownRulesNameTheFlag) {
  for (const char* bad : {"average", "clipped:tau=-1", "balance:alpha=1", "mean:x=1", "trimmed_mean:beta=0.7"}) {
    auto m = MakeNeighbourMerge(bad);
    ASSERT_FALSE(m.ok()) << bad;
    EXPECT_EQ(m.status().message().rfind("--merge: ", 0), 0u) << m.status().message();
  }
}

// A robust merge stays within the honest range, coordinate by coordinate, when fewer neighbours
// lie than the rule tolerates: median with f < (n)/2 of n = self plus neighbours, trimmed mean
// with f <= floor(beta n).
RC_GTEST_PROP(NeighbourMergeProperty, RobustRulesStayWithinTheHonestRange, ()) {
  const bool median = *rc::gen::arbitrary<bool>();
  const size_t honest = *rc::gen::inRange<size_t>(2, 9);  // self included
  const size_t n_max_liars = median ? (honest - 1) : honest / 2;
  const size_t liars = *rc::gen::inRange<size_t>(0, n_max_liars + 1);
  const size_t n = honest + liars;
  // trimmed_mean trims floor(beta n) from each end: beta chosen so that it covers the liars.
  const double beta = std::min(0.49, (static_cast<double>(liars) + 0.5) / static_cast<double>(n));
  if (!median) RC_PRE(static_cast<size_t>(beta * static_cast<double>(n)) >= liars);
  if (median) RC_PRE(liars < honest);
  const size_t dims = 3;
  auto honest_values = *rc::gen::container<std::vector<int>>(honest * dims, rc::gen::inRange(-100, 100));
  std::vector<ModelState> models;
  for (size_t i = 0; i < honest; ++i) {
    models.push_back(
        Vector({static_cast<float>(honest_values[i * dims]), static_cast<float>(honest_values[i * dims + 1]),
                static_cast<float>(honest_values[i * dims + 2])}));
  }
  for (size_t i = 0; i < liars; ++i) {
    const auto big = static_cast<float>(*rc::gen::element(-1e6, 1e6));
    models.push_back(Vector({big, -big, big}));
  }
  const std::string spec = median ? "median" : "trimmed_mean:beta=" + std::to_string(beta);
  auto merge = MakeNeighbourMerge(spec);
  RC_ASSERT(merge.ok());
  std::vector<WeightedModel> neighbours;
  for (size_t i = 1; i < n; ++i) neighbours.push_back({&models[i], 1.0 / static_cast<double>(n)});
  Result<ModelState> out = (*merge)->Merge(models[0], 1.0 / static_cast<double>(n), neighbours, 0, 1);
  RC_ASSERT(out.ok());
  for (size_t k = 0; k < dims; ++k) {
    float lo = 1e9f, hi = -1e9f;
    for (size_t i = 0; i < honest; ++i) {
      lo = std::min(lo, models[i].data()[k]);
      hi = std::max(hi, models[i].data()[k]);
    }
    RC_ASSERT(out->data()[k] >= lo - 1e-3f);
    RC_ASSERT(out->data()[k] <= hi + 1e-3f);
  }
}

}  // namespace
}  // namespace plexus::gossip
