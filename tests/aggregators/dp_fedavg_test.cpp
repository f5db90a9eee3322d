// dp_fedavg: central differential privacy's aggregate, checked against its definition: clipping
// alone when the noise is zero, noise of the stated variance (a chi-square test, not "it
// changed"), one client's influence bounded by clip / expected, adaptive clipping finding the
// target quantile, and settings that mean nothing refused.
#include <cmath>
#include <cstring>
#include <vector>

#include "aggregators/exact_sum.h"
#include "aggregators/partial_sum_delta.h"
#include "aggregators/registry.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/vector_model.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;
using ::plexus::testing::VectorModel;

Update U(const std::string& client, std::vector<float> delta, int64_t examples = 1) {
  Update u;
  u.client_id = client;
  u.task_id = "t-" + client;
  u.num_examples = examples;
  u.local_steps = 1;
  u.delta = VectorModel(delta);
  return u;
}

std::unique_ptr<Aggregator> Make(const std::string& spec) {
  auto a = MakeAggregator(spec, nullptr);
  EXPECT_OK(a) << spec;
  return a.ok() ? std::move(a).value() : nullptr;
}

ModelState Release(Aggregator& agg, const ModelState& base, const std::vector<Update>& updates) {
  EXPECT_OK(agg.Begin(base));
  for (const Update& u : updates) EXPECT_OK(agg.Fold(u));
  Result<ModelState> out = agg.Finalize();
  EXPECT_OK(out);
  return out.ok() ? std::move(out).value() : ModelState();
}

double L2Distance(const ModelState& a, const ModelState& b) {
  double s = 0;
  for (size_t i = 0; i < a.num_params(); ++i) {
    const double d = static_cast<double>(a.data()[i]) - b.data()[i];
    s += d * d;
  }
  return std::sqrt(s);
}

std::vector<Update> RandomUpdates(uint64_t seed, int n, size_t dims, double scale) {
  Rng rng(seed);
  std::vector<Update> out;
  for (int i = 0; i < n; ++i) {
    std::vector<float> d(dims);
    for (float& x : d) x = static_cast<float>(rng.Normal() * scale);
    out.push_back(U("c" + std::to_string(i), d, 1 + static_cast<int64_t>(rng.Below(50))));
  }
  return out;
}

// With no noise the release is exactly clipping and an unweighted mean: the same bits as norm
// bounding with every client weighing one example (examples must not weigh under DP).
TEST(DpFedAvgTest, NoiseZeroIsClippingAlone) {
  std::vector<Update> updates = RandomUpdates(7, 5, 300, 0.2);
  const ModelState base = VectorModel(std::vector<float>(300, 0.5f));
  auto dp = Make("dp_fedavg:clip=2,noise=0,expected=5");
  const ModelState released = Release(*dp, base, updates);
  for (Update& u : updates) u.num_examples = 1;
  auto clipped = Make("norm_bound:max=2");
  const ModelState reference = Release(*clipped, base, updates);
  ASSERT_EQ(released.num_params(), reference.num_params());
  EXPECT_EQ(released.ContentSha256(), reference.ContentSha256());
  EXPECT_EQ(released.version(), base.version() + 1);
}

// Each released coordinate of noise-only releases (every update zero) is N(0, (z·C/expected)²):
// the sum of their squares over that variance is chi-square with as many degrees of freedom as
// samples. Five standard deviations either way; 5% more noise than stated is 17 away.
void ExpectStatedVariance(const std::string& spec, double stddev, int releases, size_t dims) {
  auto dp = Make(spec);
  ASSERT_NE(dp, nullptr);
  double chi2 = 0, sum = 0;
  size_t n = 0;
  for (int r = 0; r < releases; ++r) {
    ModelState base = VectorModel(std::vector<float>(dims, 0.0f));
    base.set_version(static_cast<uint64_t>(r));
    const ModelState out = Release(*dp, base, {U("a", std::vector<float>(dims, 0.0f))});
    for (float x : out.data()) {
      chi2 += (static_cast<double>(x) / stddev) * (static_cast<double>(x) / stddev);
      sum += x;
      ++n;
    }
  }
  const double dn = static_cast<double>(n);
  EXPECT_NEAR(chi2, dn, 5 * std::sqrt(2 * dn)) << spec;
  EXPECT_NEAR(sum / (stddev * std::sqrt(dn)), 0, 5) << spec;
}

TEST(DpFedAvgTest, SeededNoiseHasTheStatedVariance) {
  // z = 1.5, C = 2, expected 4: each coordinate's noise is 1.5 · 2 / 4 = 0.75.
  ExpectStatedVariance("dp_fedavg:clip=2,noise=1.5,expected=4,seed=11", 0.75, 40, 2000);
}

TEST(DpFedAvgTest, SecureNoiseHasTheStatedVariance) {
  ExpectStatedVariance("dp_fedavg:clip=1,noise=3,expected=2", 1.5, 20, 2000);
}

// A seeded release is the same for the same seed and version, and differs between versions (a
// restarted simulation never repeats an earlier release's noise).
TEST(DpFedAvgTest, SeededNoiseIsReproducibleAndFreshPerVersion) {
  const std::vector<Update> updates = RandomUpdates(3, 4, 100, 0.1);
  ModelState base = VectorModel(std::vector<float>(100, 0.0f));
  auto a = Make("dp_fedavg:clip=1,noise=1,expected=4,seed=5");
  auto b = Make("dp_fedavg:clip=1,noise=1,expected=4,seed=5");
  EXPECT_EQ(Release(*a, base, updates).ContentSha256(), Release(*b, base, updates).ContentSha256());
  const std::string first = Release(*a, base, updates).ContentSha256();
  base.set_version(1);
  EXPECT_NE(Release(*a, base, updates).ContentSha256(), first);
}

// The noise is drawn in fixed blocks, each from its own stream: a seeded release is the same on
// one thread and on a pool.
TEST(DpFedAvgTest, SeededNoiseIsTheSameOnAPool) {
  const std::vector<Update> updates = RandomUpdates(4, 3, 70000, 0.01);
  const ModelState base = VectorModel(std::vector<float>(70000, 0.0f));
  ThreadPool pool(2);
  auto alone = Make("dp_fedavg:clip=1,noise=1,expected=3,seed=8");
  auto pooled = MakeAggregator("dp_fedavg:clip=1,noise=1,expected=3,seed=8", &pool);
  ASSERT_OK(pooled);
  EXPECT_EQ(Release(*alone, base, updates).ContentSha256(), Release(**pooled, base, updates).ContentSha256());
}

// One client sending a 1e30-norm update moves the release by at most clip / expected: the same
// seeded noise with and without it, so the difference is that client's clipped share alone.
TEST(DpFedAvgTest, OneHugeUpdateMovesTheReleaseByAtMostClipOverExpected) {
  const std::vector<Update> honest = RandomUpdates(9, 9, 100, 0.05);
  const ModelState base = VectorModel(std::vector<float>(100, 0.0f));
  std::vector<Update> attacked = honest;
  attacked.push_back(U("attacker", std::vector<float>(100, 1e29f), 1000000));  // norm 1e30
  auto clean = Make("dp_fedavg:clip=0.5,noise=1,expected=10,seed=1");
  auto hit = Make("dp_fedavg:clip=0.5,noise=1,expected=10,seed=1");
  const double moved = L2Distance(Release(*clean, base, honest), Release(*hit, base, attacked));
  EXPECT_GT(moved, 0.04);               // it counts: its clipped share is there
  EXPECT_LE(moved, 0.5 / 10 * 1.0001);  // and no more
}

// The clip follows the target quantile of the update norms, from far below and far above every
// norm, with the count counting updates with norm ≤ clip (counting clipped ones, as Flower does,
// drives the clip away from the quantile instead).
TEST(DpFedAvgTest, AdaptiveClipConvergesToTheTargetQuantile) {
  for (const char* start : {"0.01", "1000"}) {
    auto dp = Make(std::string("dp_fedavg:clip=") + start + ",noise=0,expected=20,adaptive=true,target=0.5");
    ModelState model = VectorModel(std::vector<float>(4, 0.0f));
    for (int round = 0; round < 200; ++round) {
      std::vector<Update> updates;
      for (int i = 1; i <= 20; ++i) {  // norms 1, 2, ..., 20: the median lies between 10 and 11
        updates.push_back(U("c" + std::to_string(i), {static_cast<float>(i), 0, 0, 0}));
      }
      model = Release(*dp, model, updates);
    }
    // The clip is the strategy's saved state: a restarted server resumes from it.
    const std::string state = dp->SaveState();
    ASSERT_EQ(state.size(), 8u + sizeof(double)) << start;
    double clip = 0;
    std::memcpy(&clip, state.data() + 8, sizeof clip);
    EXPECT_GE(clip, 9.0) << start;
    EXPECT_LE(clip, 12.0) << start;
    auto restored = Make(std::string("dp_fedavg:clip=") + start + ",noise=0,expected=20,adaptive=true,target=0.5");
    EXPECT_OK(restored->RestoreState(state));
    EXPECT_EQ(restored->SaveState(), state);
  }
}

// Staleness weights (FedBuff) only lower a client's share: a weight above one is capped.
TEST(DpFedAvgTest, StalenessWeightIsCappedAtOne) {
  const ModelState base = VectorModel({0, 0});
  auto dp = Make("dp_fedavg:clip=1,noise=0,expected=1");
  ASSERT_OK(dp->Begin(base));
  Update u = U("a", {3, 4});
  ASSERT_OK(dp->FoldScaled(u, 5.0));
  Result<ModelState> out = dp->Finalize();
  ASSERT_OK(out);
  EXPECT_FLOAT_EQ(out->data()[0], 0.6f);
  EXPECT_FLOAT_EQ(out->data()[1], 0.8f);
}

TEST(DpFedAvgTest, RefusesSettingsThatMeanNothing) {
  for (const char* bad : {"dp_fedavg:noise=1,expected=10", "dp_fedavg:clip=0,noise=1,expected=10",
                          "dp_fedavg:clip=1,noise=-1,expected=10", "dp_fedavg:clip=1,expected=10",
                          "dp_fedavg:clip=1,noise=1", "dp_fedavg:clip=1,noise=1,expected=10,count_noise=1",
                          "dp_fedavg:clip=1,noise=1,expected=10,adaptive=true,count_noise=0.4",
                          "dp_fedavg:clip=1,noise=1,expected=10,adaptive=true,target=1",
                          "dp_fedavg:clip=1,noise=1,expected=10,seed=-3"}) {
    EXPECT_THAT(MakeAggregator(bad, nullptr).status(), StatusIs(StatusCode::kInvalidArgument, "dp_fedavg")) << bad;
  }
  // The default count noise leaves the values a budget even with few updates per release.
  EXPECT_OK(MakeAggregator("dp_fedavg:clip=1,noise=2,expected=10,adaptive=true", nullptr));
  auto dp = Make("dp_fedavg:clip=1,noise=1,expected=2");
  ASSERT_OK(dp->Begin(VectorModel({0, 0})));
  EXPECT_THAT(dp->Fold(U("a", {NAN, 0})), StatusIs(StatusCode::kInvalidArgument, ""));
  EXPECT_THAT(dp->Fold(U("a", {1, 0, 0})), StatusIs(StatusCode::kInvalidArgument, ""));
  EXPECT_EQ(dp->num_folded(), 0u);
  EXPECT_THAT(dp->Finalize().status(), StatusIs(StatusCode::kFailedPrecondition, "no updates"));
}

// Central DP at a root over edges: the edges clip each delta and sum unweighted, exactly
// (norm_bound:max=C,exact=true,weighted=false), and the root adds the noise once to the sum of
// their partial sums. Without noise, and with the same seeded noise, the release is the flat
// server's over the same updates (up to the rounding of a partial's float mean).
TEST(DpFedAvgTest, AtARootOverEdgesPartialSumsReleaseWhatAFlatServerWould) {
  std::vector<Update> updates = RandomUpdates(5, 6, 300, 0.2);
  for (float& v : updates[1].delta.data()) v *= 30;  // well beyond the clip: the edge clips it
  const ModelState base = VectorModel(std::vector<float>(300, 0.5f));
  auto partial = [&](size_t begin, size_t end, const std::string& edge_strategy, const std::string& edge) {
    auto agg = *MakeAggregator(edge_strategy, nullptr);
    EXPECT_OK(agg->Begin(base));
    for (size_t i = begin; i < end; ++i) EXPECT_OK(agg->Fold(updates[i]));
    ExactSum sum = *agg->partial_sum();
    Update p;
    p.client_id = edge;
    p.num_examples = static_cast<int64_t>(sum.weight());
    std::string bytes = sum.Encode();
    p.coded = *PartialSumDelta::Make("exactsum", std::move(bytes), std::move(sum));
    return p;
  };
  const std::string clipping = "norm_bound:max=2,exact=true,weighted=false";
  for (const char* root : {"dp_fedavg:clip=2,noise=0,expected=6", "dp_fedavg:clip=2,noise=1,expected=6,seed=4"}) {
    auto flat = Make(root);
    auto tree = Make(root);
    ASSERT_TRUE(tree->takes_partial_sums());
    const ModelState expected = Release(*flat, base, updates);
    const ModelState released =
        Release(*tree, base, {partial(0, 3, clipping, "edge-a"), partial(3, 6, clipping, "edge-b")});
    ASSERT_EQ(released.num_params(), expected.num_params());
    for (size_t i = 0; i < released.num_params(); ++i) {
      EXPECT_NEAR(released.data()[i], expected.data()[i], 1e-5) << root << " value " << i;
    }
  }
  // Partial sums whose edge weighed its clients, or did not clip, are refused with the remedy.
  auto root = Make("dp_fedavg:clip=2,noise=1,expected=6,seed=4");
  ASSERT_OK(root->Begin(base));
  EXPECT_THAT(root->Fold(partial(0, 3, "norm_bound:max=2,exact=true", "edge-a")),
              StatusIs(StatusCode::kInvalidArgument, "weighted=false"));
  EXPECT_THAT(root->Fold(partial(0, 3, "fedavg_exact:weighted=false", "edge-a")),
              StatusIs(StatusCode::kInvalidArgument, "did not clip"));
  EXPECT_EQ(root->num_folded(), 0u);
  // Adaptive clipping cannot count the updates under the clip inside a partial sum.
  auto adaptive = Make("dp_fedavg:clip=2,noise=1,expected=6,adaptive=true,seed=4");
  EXPECT_FALSE(adaptive->takes_partial_sums());
  ASSERT_OK(adaptive->Begin(base));
  EXPECT_THAT(adaptive->Fold(partial(0, 3, clipping, "edge-a")), StatusIs(StatusCode::kInvalidArgument, "adaptive"));
}

}  // namespace
}  // namespace plexus
