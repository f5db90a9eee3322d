// dp_ftrl: DP-FTRL's tree aggregation, checked against its definition: the noise in the model
// after release t is the sum of the tree nodes covering [1, t] (its variance follows the number
// of ones in t, not t), drawn once and taken back later; no noise is the clipped mean; each
// client's contributions to a tree are capped; a restored strategy continues the same tree.
#include <bit>
#include <cmath>
#include <vector>

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
