// dp_ftrl: DP-FTRL's tree aggregation, checked against its definition: the noise in the model
// after release t is the sum of the tree nodes covering [1, t] (its variance follows the number
// of ones in t, not t), drawn once and taken back later; no noise is the clipped mean; each
// client's contributions to a tree are capped; a restored strategy continues the same tree.
#include <bit>
#include <cmath>
#include <vector>

#include "aggregators/exact_sum.h"
#include "aggregators/partial_sum_delta.h"
#include "aggregators/registry.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/vector_model.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;
using ::plexus::testing::VectorModel;

Update U(const std::string& client, std::vector<float> delta) {
  Update u;
  u.client_id = client;
  u.task_id = "t-" + client;
  u.num_examples = 1;
  u.local_steps = 1;
  u.delta = VectorModel(std::move(delta));
  return u;
}

std::unique_ptr<Aggregator> Make(const std::string& spec) {
  auto a = MakeAggregator(spec, nullptr);
  EXPECT_OK(a) << spec;
  return a.ok() ? std::move(a).value() : nullptr;
}

Result<ModelState> Release(Aggregator& agg, const ModelState& base, const std::vector<Update>& updates) {
  PLEXUS_RETURN_IF_ERROR(agg.Begin(base));
  for (const Update& u : updates) PLEXUS_RETURN_IF_ERROR(agg.Fold(u));
  return agg.Finalize();
}

// Releases of zero updates from distinct clients: the model moves by the tree noise alone. After
// release t, (θ_t − θ_0)·expected / (z·C) is the sum of popcount(t) independent standard normals
// per coordinate (a chi-square test over 20,000 coordinates); a tree restarted every 4 releases
// starts over at release 5 from the model release 4 published, that one's noise (one node) kept.
TEST(DpFtrlTest, PrefixNoiseIsTheSumOfItsTreeNodes) {
  const size_t dims = 20000;
  const double clip = 0.5, noise = 2, expected = 4;
  for (int restart : {0, 4}) {
    auto agg = Make("dp_ftrl:clip=0.5,noise=2,expected=4,seed=3,restart=" + std::to_string(restart));
    const ModelState start = VectorModel(std::vector<float>(dims, 0.0f));
    ModelState model = start;
    for (uint64_t v = 1; v <= 8; ++v) {
      Result<ModelState> next = Release(*agg, model, {U("c" + std::to_string(v), std::vector<float>(dims, 0.0f))});
      ASSERT_OK(next);
      model = std::move(next).value();
      ASSERT_EQ(model.version(), v);
      // A restarted tree starts from the model its predecessor released, noise included.
      const uint64_t trees_done = restart > 0 ? (v - 1) / restart : 0;
      const uint64_t leaf = restart > 0 ? (v - 1) % restart + 1 : v;
      const double nodes =
          static_cast<double>(trees_done * std::popcount(static_cast<uint64_t>(restart)) + std::popcount(leaf));
      double chi2 = 0;
      for (size_t i = 0; i < dims; ++i) {
        const double n = model.data()[i] * expected / (noise * clip);
        chi2 += n * n / nodes;
      }
      EXPECT_NEAR(chi2, static_cast<double>(dims), 5 * std::sqrt(2.0 * dims))
          << "version " << v << ", restart " << restart << ", nodes " << nodes;
    }
  }
}

// With noise 0 the release is the clipped unweighted mean, the same bits as dp_fedavg's.
TEST(DpFtrlTest, NoiseZeroIsTheClippedMean) {
  auto ftrl = Make("dp_ftrl:clip=1,noise=0,expected=3");
  auto fedavg = Make("dp_fedavg:clip=1,noise=0,expected=3");
  ModelState a = VectorModel({1, 2, 3}), b = a;
  for (int v = 0; v < 3; ++v) {
    const std::vector<Update> ups = {U("a" + std::to_string(v), {3, 4, 0}), U("b" + std::to_string(v), {0.1f, 0, 0})};
    a = *Release(*ftrl, a, ups);
    b = *Release(*fedavg, b, ups);
  }
  EXPECT_EQ(std::vector<float>(a.data().begin(), a.data().end()), std::vector<float>(b.data().begin(), b.data().end()));
}

// A client contributes at most `participations` times to a tree: the next is refused (and the
// engines are told not to ask it); the tree's restart frees it. Folding a batch obeys the same.
TEST(DpFtrlTest, CapsEachClientsContributionsToATree) {
  auto agg = Make("dp_ftrl:clip=1,noise=1,expected=2,restart=2,participations=1,seed=1");
  ModelState model = VectorModel({0, 0});
  EXPECT_TRUE(agg->MayContribute("a", 0));
  model = *Release(*agg, model, {U("a", {1, 0})});
  EXPECT_FALSE(agg->MayContribute("a", 1));
  EXPECT_TRUE(agg->MayContribute("b", 1));
  EXPECT_TRUE(agg->MayContribute("a", 2));  // version 3 is the first of the next tree
  ASSERT_OK(agg->Begin(model));
  EXPECT_THAT(agg->Fold(U("a", {1, 0})), StatusIs(StatusCode::kFailedPrecondition, "already contributed"));
  const Update b = U("b", {0, 1}), b_again = U("b", {0, 1}), c = U("c", {1, 1});
  const std::vector<const Update*> batch = {&b, &b_again, &c};
  EXPECT_THAT(agg->FoldAll(batch), StatusIs(StatusCode::kFailedPrecondition, "client b"));
  EXPECT_EQ(agg->num_folded(), 1u);  // b once; its second update and c after it are not folded
  EXPECT_OK(agg->Fold(c));
  model = *agg->Finalize();
  ASSERT_OK(agg->Begin(model));  // version 3: a new tree
  EXPECT_OK(agg->Fold(U("a", {1, 0})));
}

// What a restarted server continues from: a strategy restored from the saved state (key, tree,
// contributions) releases the same next model, bit for bit, as the one that kept running, and
// refuses the same clients. A secure key is in the state too.
TEST(DpFtrlTest, RestoredStateContinuesTheSameTree) {
  for (const char* spec : {"dp_ftrl:clip=1,noise=1,expected=2,participations=1,seed=9",
                           "dp_ftrl:clip=1,noise=1,expected=2,participations=1"}) {
    auto running = Make(spec);
    ModelState model = VectorModel(std::vector<float>(1000, 0.0f));
    for (int v = 0; v < 3; ++v)
      model = *Release(*running, model, {U("c" + std::to_string(v), std::vector<float>(1000, 0.1f))});
    auto restored = Make(spec);
    ASSERT_OK(restored->RestoreState(running->SaveState()));
    EXPECT_FALSE(restored->MayContribute("c1", model.version()));
    const std::vector<Update> next = {U("d", std::vector<float>(1000, -0.2f))};
    const ModelState a = *Release(*running, model, next), b = *Release(*restored, model, next);
    EXPECT_EQ(std::vector<float>(a.data().begin(), a.data().end()),
              std::vector<float>(b.data().begin(), b.data().end()))
        << spec;
  }
  auto other = Make("dp_ftrl:clip=1,noise=1,expected=2");
  EXPECT_THAT(other->RestoreState("dpclip1 not this"), StatusIs(StatusCode::kInvalidArgument, "dp_ftrl"));
  auto seeded = Make("dp_ftrl:clip=1,noise=1,expected=2,seed=1");
  EXPECT_THAT(seeded->RestoreState(other->SaveState()), StatusIs(StatusCode::kInvalidArgument, "seed"));
}

// DP-FTRL at a root over edges: each edge clips its clients' deltas and sums them unweighted
// (norm_bound:max=C,exact=true,weighted=false) and lists them; the root releases what a flat server
// would over the same updates (the same tree noise), and counts every listed client against its
// cap by its own id, whichever edge it came through. A partial that would take one of its clients
// past the cap is refused whole and takes no place; one that does not list its updates is refused.
TEST(DpFtrlTest, AtARootOverEdgesPartialSumsCountEveryClientTheyList) {
  const ModelState base = VectorModel({0.5f, -0.25f, 1.0f});
  const std::vector<Update> updates = {U("c0", {3, 4, 0}), U("c1", {0.1f, 0.2f, 0.3f}), U("c2", {-1, 0, 0.5f}),
                                       U("c3", {0, -2, 0})};
  auto partial = [&](const std::string& edge, std::vector<size_t> which, bool listed = true) {
    auto agg = *MakeAggregator("norm_bound:max=1,exact=true,weighted=false", nullptr);
    EXPECT_OK(agg->Begin(base));
    std::vector<PartialContribution> contributions;
    for (size_t i : which) {
      EXPECT_OK(agg->Fold(updates[i]));
      if (listed) contributions.push_back({updates[i].client_id, updates[i].task_id, ""});
    }
    ExactSum sum = *agg->partial_sum();
    Update p;
    p.client_id = edge;
    p.task_id = "t-" + edge;
    p.num_examples = static_cast<int64_t>(sum.weight());
    std::string bytes = sum.Encode();
    p.coded = *PartialSumDelta::Make("exactsum", std::move(bytes), std::move(sum), std::move(contributions));
    return p;
  };
  const std::string spec = "dp_ftrl:clip=1,noise=0.5,expected=4,participations=1,seed=7";
  auto flat = Make(spec), tree = Make(spec);
  ASSERT_TRUE(tree->takes_partial_sums());
  const ModelState expected = *Release(*flat, base, updates);
  Result<ModelState> released = Release(*tree, base, {partial("edge-a", {0, 1}), partial("edge-b", {2, 3})});
  ASSERT_OK(released);
  for (size_t i = 0; i < expected.num_params(); ++i) {
    EXPECT_NEAR(released->data()[i], expected.data()[i], 1e-5) << "value " << i;
  }
  // The next release of the same tree: c1 already contributed, through edge-a or any other edge.
  EXPECT_FALSE(tree->MayContribute("edge-b/c1", released->version()));
  ASSERT_OK(tree->Begin(*released));
  EXPECT_THAT(tree->Fold(partial("edge-b", {1, 2})),
              StatusIs(StatusCode::kFailedPrecondition, "client c1 (in the partial sum from edge-b)"));
  EXPECT_THAT(tree->Fold(partial("edge-b", {0}, /*listed=*/false)),
              StatusIs(StatusCode::kInvalidArgument, "lists 0 contributions for 1 updates"));
  EXPECT_EQ(tree->num_folded(), 0u);
  // The refused partial took no place: a fresh client folds, the capped ones still do not.
  EXPECT_OK(tree->Fold(U("c4", {0, 0, 1})));
  EXPECT_THAT(tree->Fold(U("c2", {0, 0, 1})), StatusIs(StatusCode::kFailedPrecondition, "client c2"));
  // A partial whose edge did not clip is refused as dp_fedavg refuses it.
  ASSERT_OK(flat->Begin(*released));
  auto unclipped = [&] {
    auto agg = *MakeAggregator("fedavg_exact:weighted=false", nullptr);
    EXPECT_OK(agg->Begin(base));
    EXPECT_OK(agg->Fold(updates[0]));
    ExactSum sum = *agg->partial_sum();
    Update p;
    p.client_id = "edge-c";
    p.num_examples = 1;
    std::string bytes = sum.Encode();
    p.coded = *PartialSumDelta::Make("exactsum", std::move(bytes), std::move(sum), {{"c9", "t", ""}});
    return p;
  }();
  EXPECT_THAT(flat->Fold(unclipped), StatusIs(StatusCode::kInvalidArgument, "did not clip"));
  EXPECT_TRUE(flat->MayContribute("c9", released->version()));  // its place was given back
}

TEST(DpFtrlTest, RefusesSettingsThatMeanNothing) {
  for (const char* bad :
       {"dp_ftrl:noise=1,expected=2", "dp_ftrl:clip=1,expected=2", "dp_ftrl:clip=1,noise=1",
        "dp_ftrl:clip=1,noise=1,expected=2,restart=-1", "dp_ftrl:clip=1,noise=1,expected=2,restart=1.5",
        "dp_ftrl:clip=1,noise=1,expected=2,participations=0"}) {
    EXPECT_THAT(MakeAggregator(bad, nullptr).status(), StatusIs(StatusCode::kInvalidArgument, "dp_ftrl")) << bad;
  }
}

}  // namespace
}  // namespace plexus
