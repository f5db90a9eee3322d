#include "aggregators/exact_sum.h"

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "aggregators/partial_sum_delta.h"
#include "aggregators/registry.h"
#include "core/rng.h"
#include "tests/testing/random_round.h"
#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

struct Contribution {
  std::vector<float> delta;
  double weight;
};

// Deltas of ordinary floats (no exact sums in float arithmetic) and weights that are example
// counts or staleness-scaled ones.
std::vector<Contribution> RandomContributions(Rng& rng, size_t n, size_t dims) {
  std::vector<Contribution> out;
  for (size_t i = 0; i < n; ++i) {
    Contribution c;
    for (size_t k = 0; k < dims; ++k) c.delta.push_back(static_cast<float>(rng.Normal() * 0.1));
    c.weight = static_cast<double>(1 + rng.Below(5000)) * (rng.Below(2) ? 1.0 : 1.0 / (1.0 + rng.Uniform()));
    out.push_back(std::move(c));
  }
  return out;
}

// The law the hierarchy rests on: the contributions summed flat, in order, and summed in any
// order through any tree of partial sums that travel as bytes, give the same bytes.
RC_GTEST_PROP(ExactSumLaws, AnyTreeAndOrderGivesTheSameBytes, ()) {
  const auto n = *rc::gen::inRange<size_t>(1, 40);
  const auto dims = *rc::gen::inRange<size_t>(1, 30);
  Rng rng(*rc::gen::arbitrary<uint64_t>());
  const std::vector<Contribution> cs = RandomContributions(rng, n, dims);
  ExactSum flat(dims);
  for (const Contribution& c : cs) RC_ASSERT(flat.Add(c.delta, c.weight).ok());

  // A random tree: shuffle, cut into groups (edges), each group's partial encoded and decoded;
  // the groups cut again into parents, merged in a shuffled order.
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  rng.Shuffle(std::span<size_t>(order));
  std::vector<ExactSum> edges;
  for (size_t i = 0; i < n;) {
    const size_t take = 1 + rng.Below(n - i);
    ExactSum edge(dims);
    for (size_t k = i; k < i + take; ++k) RC_ASSERT(edge.Add(cs[order[k]].delta, cs[order[k]].weight).ok());
    Result<ExactSum> sent = ExactSum::Decode(edge.Encode(), dims);
    RC_ASSERT(sent.ok());
    edges.push_back(*sent);
    i += take;
  }
  std::vector<size_t> edge_order(edges.size());
  for (size_t i = 0; i < edges.size(); ++i) edge_order[i] = i;
  rng.Shuffle(std::span<size_t>(edge_order));
  ExactSum middle(dims), root(dims);
  const size_t cut = rng.Below(edges.size() + 1);
  for (size_t i = 0; i < edges.size(); ++i) RC_ASSERT((i < cut ? middle : root).Merge(edges[edge_order[i]]).ok());
  RC_ASSERT(root.Merge(middle).ok());

  RC_ASSERT(root.Encode() == flat.Encode());
  RC_ASSERT(root.count() == static_cast<int64_t>(n));
  std::vector<float> a(dims), b(dims);
  RC_ASSERT(root.MeanInto(a).ok());
  RC_ASSERT(flat.MeanInto(b).ok());
  RC_ASSERT(a == b);
}

// The mean is the weighted mean to within the documented rounding: each contribution is off by
// at most 2^-25 (half a unit) and each weight by 2^-17, then one float32 rounding.
RC_GTEST_PROP(ExactSumLaws, TheMeanIsTheWeightedMeanWithinTheScale, ()) {
  const auto n = *rc::gen::inRange<size_t>(1, 30);
  const auto dims = *rc::gen::inRange<size_t>(1, 20);
  Rng rng(*rc::gen::arbitrary<uint64_t>());
  const std::vector<Contribution> cs = RandomContributions(rng, n, dims);
  ExactSum sum(dims);
  for (const Contribution& c : cs) RC_ASSERT(sum.Add(c.delta, c.weight).ok());
  std::vector<float> mean(dims);
  RC_ASSERT(sum.MeanInto(mean).ok());
  double weight = 0;
  for (const Contribution& c : cs) weight += c.weight;
  for (size_t k = 0; k < dims; ++k) {
    double exact = 0;
    for (const Contribution& c : cs) exact += c.weight * c.delta[k];
    exact /= weight;
    const double bound = static_cast<double>(n) * (std::ldexp(1.0, -25) + std::ldexp(1.0, -17) * 1.0) / weight +
                         std::fabs(exact) * (static_cast<double>(n) * std::ldexp(1.0, -17) / weight + 1e-7) + 1e-12;
    RC_ASSERT(std::fabs(mean[k] - exact) <= bound);
  }
}

// Small updates are added without a check per value (a vectorized loop); large ones, or any once
// the sum is near the int64 range, value by value. Both round alike (to even).
RC_GTEST_PROP(ExactSumLaws, TheUncheckedAndCheckedAddsAgree, ()) {
  const auto n = *rc::gen::inRange<size_t>(1, 20);
  const auto dims = *rc::gen::inRange<size_t>(1, 30);
  Rng rng(*rc::gen::arbitrary<uint64_t>());
  std::vector<Contribution> cs = RandomContributions(rng, n, dims);
  for (Contribution& c : cs) {  // halves of the 2^-24 grid too: the ties
    for (float& x : c.delta) {
      if (rng.Below(4) == 0) x = std::ldexp(static_cast<float>(static_cast<int>(rng.Below(64)) - 32) + 0.5f, -24);
    }
  }
  ExactSum fast(dims + 1), slow(dims + 1);
  std::vector<float> huge(dims + 1, 0.0f);
  huge[dims] = 3e11f;  // 2^62.1 units: every later add of `slow` takes the checked path
  RC_ASSERT(slow.Add(huge, 1.0).ok());
  for (Contribution& c : cs) {
    c.delta.push_back(0.0f);
    RC_ASSERT(fast.Add(c.delta, c.weight).ok());
    RC_ASSERT(slow.Add(c.delta, c.weight).ok());
  }
  for (size_t k = 0; k < dims; ++k) RC_ASSERT(fast.sums()[k] == slow.sums()[k]);
  RC_ASSERT(slow.weight_units() == fast.weight_units() + (int64_t{1} << ExactSum::kWeightFractionBits));
}

TEST(ExactSumTest, RefusedUpdatesLeaveTheSumAsItWas) {
  ExactSum sum(3);
  ASSERT_TRUE(sum.Add(std::vector<float>{0.5f, -0.25f, 1.0f}, 2.0).ok());
  const std::string before = sum.Encode();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_THAT(sum.Add(std::vector<float>{0.5f, std::nanf(""), 1.0f}, 1.0),
              StatusIs(StatusCode::kInvalidArgument, "non-finite value at index 1"));
  EXPECT_THAT(sum.Add(std::vector<float>{0.5f, 1.0f, inf}, 1.0), StatusIs(StatusCode::kInvalidArgument, "index 2"));
  EXPECT_THAT(sum.Add(std::vector<float>{0.5f, 1.0f}, 1.0), StatusIs(StatusCode::kInvalidArgument, "2 values"));
  for (double bad : {0.0, -1.0, 1e-9, static_cast<double>(inf), std::nan("")}) {
    EXPECT_THAT(sum.Add(std::vector<float>{0.5f, 1.0f, 1.0f}, bad), StatusIs(StatusCode::kInvalidArgument, "weight"))
        << bad;
  }
  // 1e5 examples moving a value by 1e6 is 1e11 (2^60.5 units): one such contribution ten times
  // larger does not fit alone, and a sixth of them does not fit in the sum.
  // (The values before the one that fails were added and are taken back.)
  EXPECT_THAT(sum.Add(std::vector<float>{0.5f, 0.25f, 1e7f}, 1e5), StatusIs(StatusCode::kOutOfRange, "index 2"));
  EXPECT_EQ(sum.Encode(), before);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(sum.Add(std::vector<float>{0.5f, 0.25f, 1e6f}, 1e5).ok()) << i;
  const std::string big = sum.Encode();
  EXPECT_THAT(sum.Add(std::vector<float>{0.5f, 0.25f, 1e6f}, 1e5), StatusIs(StatusCode::kOutOfRange, "index 2"));
  EXPECT_EQ(sum.Encode(), big);
  ExactSum same = *ExactSum::Decode(big, 3);
  EXPECT_THAT(sum.Merge(same), StatusIs(StatusCode::kOutOfRange, "index 2"));
  EXPECT_EQ(sum.Encode(), big);
  EXPECT_NE(before, big);
}

TEST(ExactSumTest, OnlyWholeEncodingsOfTheRightSizeDecode) {
  ExactSum sum(4);
  ASSERT_TRUE(sum.Add(std::vector<float>{1, 2, 3, 4}, 3).ok());
  const std::string bytes = sum.Encode();
  Result<ExactSum> back = ExactSum::Decode(bytes, 4);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, sum);
  EXPECT_EQ(back->count(), 1);
  EXPECT_DOUBLE_EQ(back->weight(), 3.0);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_THAT(ExactSum::Decode(bytes.substr(0, n), 4).status(), StatusIs(StatusCode::kInvalidArgument, "")) << n;
  }
  EXPECT_THAT(ExactSum::Decode(bytes + "x", 4).status(), StatusIs(StatusCode::kInvalidArgument, "bytes"));
  EXPECT_THAT(ExactSum::Decode(bytes, 5).status(), StatusIs(StatusCode::kInvalidArgument, "5 values are expected"));
  std::string forged = bytes;
  forged[24] = 0;  // count 0 with a weight
  EXPECT_THAT(ExactSum::Decode(forged, 4).status(), StatusIs(StatusCode::kInvalidArgument, "disagree"));
  EXPECT_THAT(ExactSum(2).MeanInto(std::span<float>()), StatusIs(StatusCode::kFailedPrecondition, "empty"));
}

// The strategy publishes the same bits in any order of ordinary float updates (where plain
// fedavg's float sums may differ in the last bit), close to fedavg's model.
TEST(ExactFedAvgTest, AnyOrderPublishesTheSameModelCloseToFedAvg) {
  const size_t dims = 1000, n = 25;
  const ::plexus::testing::RandomRound round = ::plexus::testing::MakeRandomRound(n, dims, 42);
  const ModelState& base = round.base;
  const std::vector<Update>& updates = round.updates;
  const auto run = [&](const std::string& spec, bool reversed) {
    auto agg = *MakeAggregator(spec, nullptr);
    EXPECT_TRUE(agg->Begin(base).ok());
    for (size_t i = 0; i < n; ++i) EXPECT_TRUE(agg->Fold(updates[reversed ? n - 1 - i : i]).ok());
    return *agg->Finalize();
  };
  const ModelState exact = run("fedavg_exact", false);
  EXPECT_EQ(exact.ContentSha256(), run("fedavg_exact", true).ContentSha256());
  EXPECT_EQ(exact.version(), base.version() + 1);
  const ModelState plain = run("fedavg", false);
  for (size_t k = 0; k < dims; ++k) EXPECT_NEAR(exact.data()[k], plain.data()[k], 1e-6) << k;
  auto agg = *MakeAggregator("fedavg_exact:weighted=false", nullptr);
  EXPECT_EQ(agg->Describe(), "fedavg_exact(weighted=false)");
}

// A random round in which client 3's update is a hundred times the others' (what a norm bound clips).
::plexus::testing::RandomRound MakeExactCase(size_t dims, size_t n) {
  ::plexus::testing::RandomRound c = ::plexus::testing::MakeRandomRound(n, dims);
  for (float& v : c.updates[3].delta.data()) v *= 100;
  return c;
}

// An edge's partial sum of `updates` as the root receives it, summed by the edge's strategy.
Update PartialOf(const std::string& edge_strategy, const ModelState& base, std::span<const Update> updates) {
  auto edge = *MakeAggregator(edge_strategy, nullptr);
  EXPECT_OK(edge->Begin(base));
  for (const Update& u : updates) EXPECT_OK(edge->Fold(u));
  ExactSum sum = *edge->partial_sum();
  std::string bytes = sum.Encode();
  Update p;
  p.client_id = "edge";
  p.num_examples = static_cast<int64_t>(sum.weight());
  p.coded = *PartialSumDelta::Make("exactsum", std::move(bytes), std::move(sum));
  return p;
}

// Server optimizers and norm bounds over exact sums (`exact=true`): the same bits in any order and
// through edges' partial sums (clipping done at the edges), close to the float strategy.
TEST(ExactAveragingTest, ServerOptimizersAndNormBoundsComposeThroughPartialSums) {
  const ::plexus::testing::RandomRound c = MakeExactCase(500, 12);
  const auto flat = [&](const std::string& spec, bool reversed) {
    auto agg = *MakeAggregator(spec, nullptr);
    EXPECT_OK(agg->Begin(c.base));
    for (size_t i = 0; i < c.updates.size(); ++i) {
      EXPECT_OK(agg->Fold(c.updates[reversed ? c.updates.size() - 1 - i : i]));
    }
    return *agg->Finalize();
  };
  const std::span<const Update> all(c.updates);
  for (const auto& [root, edge, floating] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"fedadam:exact=true,lr=0.05", "fedavg_exact", "fedadam:lr=0.05"},
           {"fedavgm:exact=true,momentum=0.5", "fedavg:exact=true", "fedavgm:momentum=0.5"},
           {"norm_bound:max=0.5,exact=true", "norm_bound:max=0.5,exact=true", "norm_bound:max=0.5"}}) {
    SCOPED_TRACE(root);
    const ModelState want = flat(root, false);
    EXPECT_EQ(want.ContentSha256(), flat(root, true).ContentSha256());
    const ModelState close = flat(floating, false);
    for (size_t k = 0; k < want.num_params(); ++k) ASSERT_NEAR(want.data()[k], close.data()[k], 1e-5) << k;
    auto tree = *MakeAggregator(root, nullptr);
    EXPECT_OK(tree->Begin(c.base));
    EXPECT_OK(tree->Fold(PartialOf(edge, c.base, all.subspan(0, 5))));
    EXPECT_OK(tree->Fold(PartialOf(edge, c.base, all.subspan(5))));
    EXPECT_EQ(tree->Finalize()->ContentSha256(), want.ContentSha256());
    EXPECT_NE(tree->partial_sum(), nullptr);
    EXPECT_NE(tree->Describe().find("exact=true"), std::string::npos) << tree->Describe();
  }
  // The norm bound did clip: the large update moves the model less than under plain FedAvg.
  EXPECT_NE(flat("norm_bound:max=0.5,exact=true", false).ContentSha256(), flat("fedavg_exact", false).ContentSha256());
  EXPECT_TRUE((*MakeAggregator("fedavg_exact", nullptr))->finalizes_to_the_mean());
  EXPECT_TRUE((*MakeAggregator("norm_bound:max=1,exact=true", nullptr))->finalizes_to_the_mean());
  EXPECT_FALSE((*MakeAggregator("fedyogi:exact=true", nullptr))->finalizes_to_the_mean());
  EXPECT_FALSE(MakeAggregator("fednova:exact=true", nullptr).ok()) << "FedNova's step counts are not summed";
}

// FedBuff's staleness factor scales an update's values, not its weight among the others: the exact
// sum's mean is the float averaging's, alone in a buffer too.
TEST(ExactAveragingTest, AStalenessFactorScalesValuesAsTheFloatAveragingDoes) {
  const ::plexus::testing::RandomRound c = MakeExactCase(100, 3);
  for (const char* spec : {"fedavg", "fedavg:weighted=false"}) {
    auto floating = *MakeAggregator(spec, nullptr);
    auto exact =
        *MakeAggregator(std::string(spec) + (std::string(spec) == "fedavg" ? ":" : ",") + "exact=true", nullptr);
    ASSERT_OK(floating->Begin(c.base));
    ASSERT_OK(exact->Begin(c.base));
    for (size_t i = 0; i < c.updates.size(); ++i) {
      Update a = c.updates[i], b = c.updates[i];
      ASSERT_OK(floating->FoldScaled(a, 0.25 * static_cast<double>(i + 1)));
      ASSERT_OK(exact->FoldScaled(b, 0.25 * static_cast<double>(i + 1)));
    }
    const ModelState want = *floating->Finalize(), got = *exact->Finalize();
    for (size_t k = 0; k < want.num_params(); ++k) ASSERT_NEAR(got.data()[k], want.data()[k], 1e-6) << spec << k;
  }
}

// The optimizer's state (FedAvgM's velocity) is saved with each round and restored by a restarted
// server: its next round gives the bits an uninterrupted one does.
TEST(ExactAveragingTest, TheOptimizersStateSurvivesARestart) {
  const ::plexus::testing::RandomRound c = MakeExactCase(64, 4);
  const auto round = [&](Aggregator& agg, const ModelState& base) {
    EXPECT_OK(agg.Begin(base));
    for (const Update& u : c.updates) EXPECT_OK(agg.Fold(u));
    return *agg.Finalize();
  };
  auto kept = *MakeAggregator("fedavgm:exact=true,momentum=0.9", nullptr);
  const ModelState first = round(*kept, c.base);
  const std::string state = kept->SaveState();
  ASSERT_FALSE(state.empty());
  const ModelState second = round(*kept, first);
  auto restarted = *MakeAggregator("fedavgm:exact=true,momentum=0.9", nullptr);
  ASSERT_OK(restarted->RestoreState(state));
  EXPECT_EQ(round(*restarted, first).ContentSha256(), second.ContentSha256());
}

}  // namespace
}  // namespace plexus
