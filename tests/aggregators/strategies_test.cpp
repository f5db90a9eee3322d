// Hand-checked cases for every strategy, and their precondition errors.
#include <cmath>
#include <span>

#include "aggregators/fedbuff.h"
#include "aggregators/registry.h"
#include "aggregators/robust_aggregator.h"
#include "aggregators/staleness.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/vector_model.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

ModelState Vec(const std::vector<float>& v) { return ::plexus::testing::VectorModel(v); }

Update U(const std::string& client, std::vector<float> delta, int64_t examples = 1, int64_t steps = 1) {
  Update u;
  u.client_id = client;
  u.task_id = "t-" + client;
  u.num_examples = examples;
  u.local_steps = steps;
  u.delta = Vec(std::move(delta));
  return u;
}

// Runs one aggregation of 1-D deltas over a zero base; clients are named a, b, c, ...
Result<ModelState> Aggregate(Aggregator& agg, const std::vector<std::vector<float>>& deltas, size_t dims = 1) {
  PLEXUS_RETURN_IF_ERROR(agg.Begin(Vec(std::vector<float>(dims, 0.0f))));
  for (size_t i = 0; i < deltas.size(); ++i) {
    PLEXUS_RETURN_IF_ERROR(agg.Fold(U(std::string(1, static_cast<char>('a' + i)), deltas[i])));
  }
  return agg.Finalize();
}

std::unique_ptr<Aggregator> Make(const std::string& spec) {
  auto a = MakeAggregator(spec, nullptr);
  EXPECT_OK(a) << spec;
  return std::move(a).value();
}

TEST(FedAvgMTest, MomentumCarriesAcrossRounds) {
  auto agg = Make("fedavgm:momentum=0.9,lr=1");
  ModelState x = *Aggregate(*agg, {{1}, {3}});
  EXPECT_FLOAT_EQ(x.data()[0], 2.0f);  // v = 2
  ASSERT_OK(agg->Begin(x));
  ASSERT_OK(agg->Fold(U("a", {2})));
  x = *agg->Finalize();
  EXPECT_FLOAT_EQ(x.data()[0], 2.0f + 3.8f);  // v = 0.9 * 2 + 2
  EXPECT_EQ(agg->Describe(), "fedavgm(lr=1,momentum=0.9)");
}

// DiLoCo's outer step by hand (Nesterov, outer lr 0.7, momentum 0.9): the mean delta d is minus
// the outer gradient g; PyTorch's SGD(nesterov=True) does b = 0.9 b + g; x -= 0.7 (g + 0.9 b).
// Round 1, d = 0.1: b = -0.1, x = 1 + 0.7 * 0.19 = 1.133. Round 2, d = -0.2: b = -0.09 + 0.2 =
// 0.11, x = 1.133 - 0.7 * (0.2 + 0.099) = 0.9237. Without Nesterov: FedAvgM's x += 0.7 v.
TEST(DiLoCoTest, OuterNesterovStepsMatchTheHandComputation) {
  auto agg = Make("diloco");
  EXPECT_EQ(agg->Describe(), "diloco(lr=0.7,momentum=0.9,nesterov=true)");
  ASSERT_OK(agg->Begin(Vec({1})));
  ASSERT_OK(agg->Fold(U("a", {0.05f})));
  ASSERT_OK(agg->Fold(U("b", {0.15f})));
  ModelState x = *agg->Finalize();
  EXPECT_NEAR(x.data()[0], 1.133, 1e-6);
  // The velocity is state: a restarted server restores it and takes the same second step.
  auto restarted = Make("diloco");
  ASSERT_OK(restarted->RestoreState(agg->SaveState()));
  for (Aggregator* a : {agg.get(), restarted.get()}) {
    ASSERT_OK(a->Begin(x));
    ASSERT_OK(a->Fold(U("a", {-0.2f})));
    EXPECT_NEAR(a->Finalize()->data()[0], 0.9237, 1e-6);
  }
  auto plain = Make("diloco:nesterov=false,outer_lr=0.5,momentum=0.5");
  ASSERT_OK(plain->Begin(Vec({1})));
  ASSERT_OK(plain->Fold(U("a", {0.2f})));
  EXPECT_NEAR(plain->Finalize()->data()[0], 1.1, 1e-6);
  EXPECT_NE(Make("diloco:exact=true")->partial_sum(), nullptr) << "a root under edges runs it over exact sums";
  EXPECT_FALSE(MakeAggregator("diloco:momentum=1", nullptr).ok());
  EXPECT_FALSE(MakeAggregator("diloco:outer_lr=0", nullptr).ok());
}

// DeMo's step by hand: the mean of (1, -3, 0) and (1, 1, 0) is (1, -1, 0); x moves by lr times
// its sign, whatever the scale.
TEST(DeMoTest, TheServerStepsByTheSignOfTheMeanComponents) {
  auto agg = Make("demo:lr=0.01");
  EXPECT_EQ(agg->Describe(), "demo(lr=0.01)");
  ASSERT_OK(agg->Begin(Vec({1, 1, 1})));
  ASSERT_OK(agg->Fold(U("a", {1, -3, 0})));
  ASSERT_OK(agg->Fold(U("b", {1, 1, 0})));
  ModelState x = *agg->Finalize();
  EXPECT_FLOAT_EQ(x.data()[0], 1.01f);
  EXPECT_FLOAT_EQ(x.data()[1], 0.99f);
  EXPECT_FLOAT_EQ(x.data()[2], 1.0f);
  EXPECT_EQ(x.version(), 1u);
  EXPECT_TRUE(agg->takes_the_mean());
  EXPECT_FALSE(MakeAggregator("demo:lr=0", nullptr).ok());
}

TEST(FedNovaTest, NormalizesByLocalSteps) {
  auto agg = Make("fednova");
  ASSERT_OK(agg->Begin(Vec({0})));
  ASSERT_OK(agg->Fold(U("a", {2}, 1, 1)));
  ASSERT_OK(agg->Fold(U("b", {8}, 1, 4)));
  // sum p_i d_i / tau_i = 0.5 * 2 + 0.5 * 2 = 2; tau_eff = 0.5 * 1 + 0.5 * 4 = 2.5
  EXPECT_FLOAT_EQ(agg->Finalize()->data()[0], 5.0f);
  ASSERT_OK(agg->Begin(Vec({0})));
  EXPECT_THAT(agg->Fold(U("c", {1}, 1, 0)), StatusIs(StatusCode::kInvalidArgument, "local steps"));
}

TEST(FedOptTest, FirstStepMatchesTheFormulas) {
  const double lr = 0.1, b1 = 0.9, b2 = 0.99, tau = 1e-3, g = 1.0;
  const double m = (1 - b1) * g;
  const double v_adam = b2 * tau * tau + (1 - b2) * g * g;
  const double v_yogi = tau * tau + (1 - b2) * g * g;  // v < g^2, so v grows
  const double v_adagrad = tau * tau + g * g;
  EXPECT_NEAR(Aggregate(*Make("fedadam:lr=0.1,beta1=0.9,beta2=0.99,tau=1e-3"), {{1}})->data()[0],
              lr * m / (std::sqrt(v_adam) + tau), 1e-6);
  EXPECT_NEAR(Aggregate(*Make("fedyogi:lr=0.1,beta1=0.9,beta2=0.99,tau=1e-3"), {{1}})->data()[0],
              lr * m / (std::sqrt(v_yogi) + tau), 1e-6);
  EXPECT_NEAR(Aggregate(*Make("fedadagrad:lr=0.1,beta1=0.9,tau=1e-3"), {{1}})->data()[0],
              lr * m / (std::sqrt(v_adagrad) + tau), 1e-6);
  EXPECT_THAT(MakeAggregator("fedadam:beta1=1.5", nullptr), StatusIs(StatusCode::kInvalidArgument, "beta1"));
  EXPECT_THAT(MakeAggregator("fedadagrad:beta2=0.5", nullptr),
              StatusIs(StatusCode::kInvalidArgument, "no parameter 'beta2'"));
}

TEST(KrumTest, PicksTheMostCentralUpdate) {
  // Scores with n - f - 2 = 2 neighbours: 0 -> 5, 1 -> 2, 2 -> 2, 3 -> 5, 100 -> huge.
  // 1 and 2 tie; the smaller client id (b, holding 1) wins.
  EXPECT_FLOAT_EQ(Aggregate(*Make("krum:f=1"), {{0}, {1}, {2}, {3}, {100}})->data()[0], 1.0f);
  EXPECT_FLOAT_EQ(Aggregate(*Make("multikrum:f=1,m=2"), {{0}, {1}, {2}, {3}, {100}})->data()[0], 1.5f);
  // m defaults to n - f = 4: the mean of the four honest updates.
  EXPECT_FLOAT_EQ(Aggregate(*Make("multikrum:f=1"), {{0}, {1}, {2}, {3}, {100}})->data()[0], 1.5f);
}

TEST(KrumTest, PreconditionsAreNamed) {
  EXPECT_THAT(Aggregate(*Make("krum:f=1"), {{0}, {1}, {2}, {3}}),
              StatusIs(StatusCode::kFailedPrecondition, "krum needs n > 2f + 2 updates (got n=4 with f=1)"));
  EXPECT_THAT(Aggregate(*Make("multikrum:f=0,m=9"), {{0}, {1}, {2}}),
              StatusIs(StatusCode::kFailedPrecondition, "m=9 exceeds"));
  EXPECT_THAT(MakeAggregator("krum:f=-1", nullptr), StatusIs(StatusCode::kInvalidArgument, "non-negative integer"));
  // An f whose 2f + 3 would overflow (found by strategy_spec_fuzz) is refused, not computed.
  EXPECT_THAT(MakeAggregator("multikrum:f=004852094820647174142,m=5", nullptr),
              StatusIs(StatusCode::kInvalidArgument, "f=4852094820647174142 is too large"));
  EXPECT_THAT(MakeAggregator("krum:f=9223372036854775807", nullptr),
              StatusIs(StatusCode::kInvalidArgument, "too large"));
  EXPECT_OK(MakeAggregator("krum:f=4611686018427387900", nullptr).status());
}

TEST(CoordinateWiseTest, MedianAndTrimmedMean) {
  ModelState med = *Aggregate(*Make("median"), {{1, 5}, {2, 1}, {3, 3}, {100, 2}}, 2);
  EXPECT_FLOAT_EQ(med.data()[0], 2.5f);
  EXPECT_FLOAT_EQ(med.data()[1], 2.5f);
  EXPECT_FLOAT_EQ(Aggregate(*Make("median"), {{1}, {5}, {3}})->data()[0], 3.0f);
  EXPECT_FLOAT_EQ(Aggregate(*Make("trimmed_mean:beta=0.2"), {{1}, {2}, {3}, {4}, {100}})->data()[0], 3.0f);
  EXPECT_FLOAT_EQ(Aggregate(*Make("trimmed_mean:beta=0"), {{1}, {2}, {3}})->data()[0], 2.0f);
  EXPECT_THAT(MakeAggregator("trimmed_mean:beta=0.5", nullptr), StatusIs(StatusCode::kInvalidArgument, "[0, 0.5)"));
}

TEST(CoordinateWiseTest, ManyCoordinatesAcrossBlocksAndThreads) {
  const size_t dims = 1000;
  std::vector<std::vector<float>> deltas(5, std::vector<float>(dims));
  for (size_t i = 0; i < 5; ++i) {
    for (size_t j = 0; j < dims; ++j) deltas[i][j] = static_cast<float>((i * 7 + j) % 5);
  }
  ThreadPool pool(2);
  auto threaded = *MakeAggregator("median", &pool);
  ModelState a = *Aggregate(*Make("median"), deltas, dims);
  ModelState b = *Aggregate(*threaded, deltas, dims);
  EXPECT_EQ(a, b);
  for (size_t j = 0; j < dims; ++j) ASSERT_FLOAT_EQ(a.data()[j], 2.0f);  // each column is a permutation of 0..4
}

TEST(BulyanTest, SelectsByKrumThenTrimsAroundTheMedian) {
  // Iterated Krum selects 2, 3, 1, 4, 0; the 3 values closest to their median 2 are 1, 2, 3.
  EXPECT_FLOAT_EQ(Aggregate(*Make("bulyan:f=1"), {{0}, {1}, {2}, {3}, {4}, {5}, {1000}})->data()[0], 2.0f);
  EXPECT_THAT(Aggregate(*Make("bulyan:f=1"), {{0}, {1}, {2}, {3}, {4}, {5}}),
              StatusIs(StatusCode::kFailedPrecondition, "bulyan needs n >= 4f + 3 updates (got n=6 with f=1)"));
  EXPECT_THAT(MakeAggregator("bulyan:f=2305843009213693952", nullptr),
              StatusIs(StatusCode::kInvalidArgument, "f=2305843009213693952 is too large"));
  EXPECT_OK(MakeAggregator("bulyan:f=2305843009213693951", nullptr).status());
}

TEST(GeoMedTest, ConvergesToTheMedianInOneDimension) {
  EXPECT_NEAR(Aggregate(*Make("geomed:eps=1e-6,iters=100"), {{0}, {0}, {10}})->data()[0], 0.0, 1e-3);
  // Far from a plain mean when one input is an outlier.
  ModelState z = *Aggregate(*Make("geomed"), {{1, 1}, {1, 1}, {1, 1}, {1000, -1000}}, 2);
  EXPECT_NEAR(z.data()[0], 1.0, 0.01);
  EXPECT_NEAR(z.data()[1], 1.0, 0.01);
  EXPECT_THAT(MakeAggregator("geomed:iters=0", nullptr), StatusIs(StatusCode::kInvalidArgument, "iters"));
}

TEST(CenteredClipTest, ClipsAroundTheCenter) {
  // Center 0, tau 1: (min(1, 1/10) * 10 + 0 + 0) / 3.
  EXPECT_FLOAT_EQ(Aggregate(*Make("centered_clip:tau=1,iters=1"), {{10}, {0}, {0}})->data()[0], 1.0f / 3.0f);
  EXPECT_THAT(MakeAggregator("centered_clip:tau=0", nullptr), StatusIs(StatusCode::kInvalidArgument, "tau"));
}

TEST(IterativeRulesTest, RefuseAnIterationCountThatWouldHoldARoundForDays) {
  for (const std::string rule : {"centered_clip", "geomed"}) {
    const std::string most = rule + ":iters=" + std::to_string(kMaxRobustIterations);
    EXPECT_OK(MakeAggregator(most, nullptr)) << most;
    const std::string beyond = rule + ":iters=" + std::to_string(kMaxRobustIterations + 1);
    EXPECT_THAT(MakeAggregator(beyond, nullptr),
                StatusIs(StatusCode::kInvalidArgument, "between 1 and " + std::to_string(kMaxRobustIterations)))
        << beyond;
    EXPECT_THAT(MakeAggregator(rule + ":iters=1000000000000", nullptr),
                StatusIs(StatusCode::kInvalidArgument, "iters"));
  }
}

TEST(NormBoundTest, FixedAndMedianBounds) {
  ModelState fixed = *Aggregate(*Make("norm_bound:max=1"), {{3, 4}, {0, 0.5f}}, 2);
  EXPECT_FLOAT_EQ(fixed.data()[0], 0.3f);
  EXPECT_FLOAT_EQ(fixed.data()[1], 0.65f);
  // Norms 5, 0.5 and 1: the median bound 1 shrinks only the first.
  ModelState med = *Aggregate(*Make("norm_bound:max=median"), {{3, 4}, {0, 0.5f}, {1, 0}}, 2);
  EXPECT_FLOAT_EQ(med.data()[0], (0.6f + 0.0f + 1.0f) / 3);
  EXPECT_FLOAT_EQ(med.data()[1], (0.8f + 0.5f + 0.0f) / 3);
  EXPECT_THAT(MakeAggregator("norm_bound:max=-2", nullptr), StatusIs(StatusCode::kInvalidArgument, "positive number"));
}

TEST(StalenessTest, RulesMatchTheirDefinitions) {
  EXPECT_DOUBLE_EQ(StalenessRule::Parse("constant")->Weight(100), 1.0);
  EXPECT_DOUBLE_EQ(StalenessRule::Parse("poly:a=0.5")->Weight(3), 0.5);
  StalenessRule hinge = *StalenessRule::Parse("hinge:a=10,b=4");
  EXPECT_DOUBLE_EQ(hinge.Weight(4), 1.0);
  EXPECT_DOUBLE_EQ(hinge.Weight(5), 1.0 / 11.0);
  EXPECT_EQ(hinge.Describe(), "hinge:a=10,b=4");
  EXPECT_THAT(StalenessRule::Parse("exp"), StatusIs(StatusCode::kInvalidArgument, "unknown staleness rule 'exp'"));
  EXPECT_THAT(StalenessRule::Parse("poly:b=1"), StatusIs(StatusCode::kInvalidArgument, "no parameter 'b'"));
  EXPECT_THAT(StalenessRule::Parse("poly:a=-1"), StatusIs(StatusCode::kInvalidArgument, "negative"));
}

TEST(FedBuffTest, PublishesEveryKStalenessWeighted) {
  auto buffer = *FedBuffBuffer::Create({2, 1.0}, *StalenessRule::Parse("poly:a=1"), Make("fedavg:weighted=false"));
  ASSERT_OK(buffer->Begin(Vec({10})));
  EXPECT_FALSE(*buffer->Add(U("a", {2}), 0));          // weight 1
  EXPECT_TRUE(*buffer->Add(U("b", {4}), 1));           // weight 1/2
  EXPECT_FLOAT_EQ(buffer->Flush()->data()[0], 12.0f);  // 10 + (2 + 2) / 2

  auto slow = *FedBuffBuffer::Create({1, 0.5}, *StalenessRule::Parse("constant"), Make("fedavg"));
  ASSERT_OK(slow->Begin(Vec({10})));
  EXPECT_TRUE(*slow->Add(U("a", {4}), 7));
  EXPECT_FLOAT_EQ(slow->Flush()->data()[0], 12.0f);  // 10 + 0.5 * 4
  EXPECT_THAT(FedBuffBuffer::Create({0, 1.0}, *StalenessRule::Parse("constant"), Make("fedavg")),
              StatusIs(StatusCode::kInvalidArgument, "buffer size"));
}

TEST(AllStrategiesTest, FoldScaledFoldsTheScaledDelta) {
  // The averaging family takes the factor into the weight, the others scale the values first:
  // either way the result is that of folding the scaled deltas.
  const std::vector<std::vector<float>> deltas = {{1.0f, -2.0f, 3.0f}, {0.5f, 4.0f, -1.0f}, {2.0f, 2.0f, 2.0f}};
  const std::vector<double> factors = {1.0, 0.5, 0.25};
  for (const char* spec : {"fedavg", "fedavg:weighted=false", "fednova", "fedadam", "median", "trimmed_mean",
                           "krum:f=0", "geomed", "centered_clip"}) {
    auto scaled = Make(spec), reference = Make(spec);
    ASSERT_OK(scaled->Begin(Vec({0, 0, 0})));
    ASSERT_OK(reference->Begin(Vec({0, 0, 0})));
    for (size_t i = 0; i < deltas.size(); ++i) {
      const std::string client(1, static_cast<char>('a' + i));
      Update u =
          U(client, deltas[i], /*examples=*/static_cast<int64_t>(i + 1), /*steps=*/static_cast<int64_t>(2 * i + 1));
      ASSERT_OK(scaled->FoldScaled(u, factors[i])) << spec;
      std::vector<float> by_hand = deltas[i];
      for (float& x : by_hand) x = static_cast<float>(x * factors[i]);
      ASSERT_OK(reference->Fold(U(client, by_hand, static_cast<int64_t>(i + 1), static_cast<int64_t>(2 * i + 1))))
          << spec;
    }
    const ModelState got = *scaled->Finalize(), want = *reference->Finalize();
    for (size_t j = 0; j < want.num_params(); ++j)
      EXPECT_NEAR(got.data()[j], want.data()[j], 1e-6) << spec << " [" << j << "]";
  }
}

TEST(AllStrategiesTest, RefuseBadUpdatesAndEmptyRounds) {
  for (const char* spec : {"fedavg", "fedavgm", "diloco", "fednova", "fedadam", "fedyogi", "fedadagrad", "krum:f=0",
                           "multikrum:f=0", "median", "trimmed_mean", "bulyan:f=0", "geomed", "centered_clip",
                           "norm_bound:max=1", "norm_bound", "ties", "dare"}) {
    auto agg = Make(spec);
    ASSERT_OK(agg->Begin(Vec({0, 0})));
    EXPECT_THAT(agg->Fold(U("a", {1})), StatusIs(StatusCode::kInvalidArgument, "shape [1], expected [2]")) << spec;
    EXPECT_THAT(agg->Fold(U("a", {NAN, 1})), StatusIs(StatusCode::kInvalidArgument, "non-finite")) << spec;
    EXPECT_THAT(agg->Finalize(), StatusIs(StatusCode::kFailedPrecondition, "no updates")) << spec;
    EXPECT_EQ(agg->num_folded(), 0u) << spec;
  }
}

}  // namespace
}  // namespace plexus

namespace plexus {
namespace {

TEST(FoldAllTest, MatchesFoldingOneByOneAndStopsAtTheFirstBadUpdate) {
  const size_t dims = 5000;
  std::vector<Update> ups;
  for (int i = 0; i < 5; ++i) {
    std::vector<float> d(dims);
    for (size_t j = 0; j < dims; ++j) d[j] = std::sin(static_cast<float>(i * dims + j));
    ups.push_back(U("c" + std::to_string(i), d, 1 + i, 1 + i));
  }
  ModelState base = Vec(std::vector<float>(dims, 0.5f));
  ThreadPool pool(2);
  for (const char* spec : {"fedavg", "fednova", "fedadam", "norm_bound:max=3", "median"}) {
    auto one = *MakeAggregator(spec, &pool);
    auto all = *MakeAggregator(spec, &pool);
    ASSERT_OK(one->Begin(base));
    ASSERT_OK(all->Begin(base));
    std::vector<const Update*> ptrs;
    for (const Update& u : ups) {
      ASSERT_OK(one->Fold(u));
      ptrs.push_back(&u);
    }
    ASSERT_OK(all->FoldAll(ptrs));
    const ModelState want = *one->Finalize();
    EXPECT_EQ(want, *all->Finalize()) << spec;

    // Deltas checked finite as they were read (files, decoded uploads) are folded in place, with
    // no second buffer and no finiteness check of the sum: the same bits.
    std::vector<Update> checked = ups;
    std::vector<const Update*> checked_ptrs;
    for (Update& u : checked) {
      u.delta.MarkCheckedFinite();
      checked_ptrs.push_back(&u);
    }
    auto in_place = *MakeAggregator(spec, &pool);  // fresh: server optimizers keep state
    ASSERT_OK(in_place->Begin(base));
    ASSERT_OK(in_place->FoldAll(std::span(checked_ptrs).first(2)));
    ASSERT_OK(in_place->FoldAll(std::span(checked_ptrs).subspan(2)));
    EXPECT_EQ(want, *in_place->Finalize()) << spec;

    // A NaN in the fourth update: the first three are folded, the rest are not.
    std::vector<Update> bad = ups;
    bad[3].delta.data()[dims - 1] = NAN;
    std::vector<const Update*> bad_ptrs;
    for (const Update& u : bad) bad_ptrs.push_back(&u);
    ASSERT_OK(all->Begin(base));
    EXPECT_THAT(all->FoldAll(bad_ptrs), StatusIs(StatusCode::kInvalidArgument, "client c3")) << spec;
    EXPECT_EQ(all->num_folded(), 3u) << spec;
  }
}

TEST(AggregateTest, OneCallGivesTheBitsAndErrorsOfBeginFoldAllFinalize) {
  const size_t dims = 100003;  // several cache blocks, split over two threads, with a ragged end
  std::vector<Update> ups;
  for (int i = 0; i < 7; ++i) {
    std::vector<float> d(dims);
    for (size_t j = 0; j < dims; ++j) d[j] = std::sin(static_cast<float>(i * dims + j)) * (1.0f + i);
    ups.push_back(U("c" + std::to_string(i), d, 1 + 3 * i, 1 + i));
  }
  ModelState base = Vec(std::vector<float>(dims, 0.25f));
  base.set_version(4);
  ThreadPool pool(2);
  std::vector<const Update*> ptrs;
  for (const Update& u : ups) ptrs.push_back(&u);
  for (const char* spec : {"fedavg", "fedavg:weighted=false", "fednova", "fedavgm", "median"}) {
    auto three = *MakeAggregator(spec, &pool);
    auto one = *MakeAggregator(spec, &pool);
    ASSERT_OK(three->Begin(base));
    ASSERT_OK(three->FoldAll(ptrs));
    ModelState expected = *three->Finalize();
    Result<ModelState> got = one->Aggregate(base, ptrs);
    ASSERT_OK(got.status());
    EXPECT_EQ(got->version(), 5u) << spec;
    EXPECT_EQ(*got, expected) << spec;

    std::vector<Update> bad = ups;
    bad[5].delta.data()[dims - 1] = INFINITY;
    std::vector<const Update*> bad_ptrs;
    for (const Update& u : bad) bad_ptrs.push_back(&u);
    EXPECT_THAT(one->Aggregate(base, bad_ptrs), StatusIs(StatusCode::kInvalidArgument, "client c5")) << spec;
    EXPECT_THAT(one->Aggregate(base, {}), StatusIs(StatusCode::kFailedPrecondition, "no updates")) << spec;
    bad[5] = U("c5", {1, 2});
    EXPECT_THAT(one->Aggregate(base, bad_ptrs), StatusIs(StatusCode::kInvalidArgument, "c5")) << spec;
  }
}

}  // namespace
}  // namespace plexus

#include "aggregators/coordinate_wise.h"
#include "core/rng.h"

namespace plexus {
namespace {

TEST(SortingNetworkTest, SortsEveryZeroOneInputUpTo14) {
  // Zero-one principle: a comparator network that sorts all 0/1 inputs sorts everything.
  for (size_t n = 1; n <= 14; ++n) {
    const auto net = SortingNetwork(n);
    for (uint32_t bits = 0; bits < (1u << n); ++bits) {
      std::vector<int> v(n);
      for (size_t i = 0; i < n; ++i) v[i] = (bits >> i) & 1;
      for (auto [a, b] : net) {
        if (v[a] > v[b]) std::swap(v[a], v[b]);
      }
      ASSERT_TRUE(std::is_sorted(v.begin(), v.end())) << n << " " << bits;
    }
  }
}

TEST(TiesTest, TrimElectSignAndDisjointMean) {
  // density 1 keeps everything: coordinate 0 elects + (mass 3) and averages 1 and 3; coordinate
  // 1 elects - (mass -2) and averages -2 and -1.
  ModelState all = *Aggregate(*Make("ties:density=1"), {{1, -2}, {3, 1}, {-1, -1}}, 2);
  EXPECT_FLOAT_EQ(all.data()[0], 2.0f);
  EXPECT_FLOAT_EQ(all.data()[1], -1.5f);
  // density 0.5 keeps each delta's larger entry (both on a tie): a keeps -2, b keeps 3, c both.
  ModelState half = *Aggregate(*Make("ties:density=0.5,lambda=2"), {{1, -2}, {3, 1}, {-1, -1}}, 2);
  EXPECT_FLOAT_EQ(half.data()[0], 2.0f * 3.0f);   // mass 3 - 1 = 2 > 0: only b agrees
  EXPECT_FLOAT_EQ(half.data()[1], 2.0f * -1.5f);  // a and c agree on -
  EXPECT_THAT(MakeAggregator("ties:density=0", nullptr), StatusIs(StatusCode::kInvalidArgument, "(0, 1]"));
}

TEST(DareTest, NoDropIsTheWeightedMeanAndDropsAreSeeded) {
  ModelState keep = *Aggregate(*Make("dare:p=0"), {{2, 4}, {4, 8}}, 2);
  EXPECT_FLOAT_EQ(keep.data()[0], 3.0f);
  EXPECT_FLOAT_EQ(keep.data()[1], 6.0f);
  const std::vector<std::vector<float>> many = {std::vector<float>(1000, 1.0f), std::vector<float>(1000, 3.0f)};
  ModelState a = *Aggregate(*Make("dare:p=0.5,seed=7"), many, 1000);
  ModelState b = *Aggregate(*Make("dare:p=0.5,seed=7"), many, 1000);
  ModelState c = *Aggregate(*Make("dare:p=0.5,seed=8"), many, 1000);
  EXPECT_EQ(a, b);
  EXPECT_NE(a.ContentSha256(), c.ContentSha256());
  double mean = 0.0;  // rescaled survivors keep the expectation: about 2
  for (float x : a.data()) mean += x / 1000.0;
  EXPECT_NEAR(mean, 2.0, 0.15);
  EXPECT_THAT(MakeAggregator("dare:p=1", nullptr), StatusIs(StatusCode::kInvalidArgument, "[0, 1)"));
}

TEST(CoordinateWiseTest, TrimmedMeanOverManyClientsMatchesSortAndDrop) {
  // n = 37, beta = 0.1: k = 3 dropped at each end of every coordinate, over a pool of threads.
  Rng rng(4);
  const size_t n = 37, p = 1001;
  ThreadPool pool(2);
  auto agg = *MakeAggregator("trimmed_mean:beta=0.1", &pool);
  ASSERT_OK(agg->Begin(Vec(std::vector<float>(p, 0.0f))));
  std::vector<std::vector<float>> data(n, std::vector<float>(p));
  for (size_t i = 0; i < n; ++i) {
    for (float& x : data[i]) x = static_cast<float>(rng.Normal() * (i % 5 == 0 ? 1e6 : 1.0));
    ASSERT_OK(agg->Fold(U("c" + std::to_string(100 + i), data[i])));
  }
  const ModelState got = *agg->Finalize();
  for (size_t c = 0; c < p; ++c) {
    std::vector<float> col;
    for (auto& d : data) col.push_back(d[c]);
    std::sort(col.begin(), col.end());
    double sum = 0.0;
    for (size_t i = 3; i < n - 3; ++i) sum += col[i];
    ASSERT_NEAR(got.data()[c], sum / (n - 6), 1e-3 * std::abs(sum / (n - 6)) + 1e-4) << c;
    // The same bits as this sum: the kept values added in ascending order, in double, then scaled
    // by 1 / (n - 2k) (every build and thread count gives these bits).
    ASSERT_EQ(got.data()[c], static_cast<float>(sum * (1.0 / static_cast<double>(n - 6)))) << c;
  }
}

TEST(SortingNetworkTest, BlockedMedianMatchesNthElementForManySizes) {
  Rng rng(9);
  ThreadPool pool(2);
  for (size_t n : {1u, 2u, 3u, 7u, 10u, 16u, 17u, 31u, 32u, 33u, 48u, 64u, 65u, 100u, 127u, 128u, 129u, 257u}) {
    const size_t p = 3001;
    std::vector<std::vector<float>> data(n, std::vector<float>(p));
    std::vector<const float*> ptrs;
    for (auto& d : data) {
      for (float& x : d) x = static_cast<float>(rng.Normal());
      ptrs.push_back(d.data());
    }
    auto median = [](const float* const* rows, size_t k, size_t len, double* out, const void*) {
      for (size_t c = 0; c < len; ++c)
        out[c] = k % 2 ? rows[k / 2][c] : 0.5 * (double(rows[k / 2 - 1][c]) + rows[k / 2][c]);
    };
    std::vector<uint32_t> ranks = {static_cast<uint32_t>(n / 2)};
    if (n % 2 == 0) ranks.insert(ranks.begin(), static_cast<uint32_t>(n / 2 - 1));
    const std::vector<double> got = ReduceSortedCoordinates(ptrs, p, &pool, ranks, median, nullptr);
    for (size_t c = 0; c < p; ++c) {
      std::vector<float> col;
      for (auto& d : data) col.push_back(d[c]);
      ASSERT_EQ(got[c], MedianInPlace(col.data(), n)) << n << " " << c;
    }
  }
}

// Every n from 1 to 300 rows, and three larger, sorted fully (AllRanks), and with only the tails a
// trimmed mean asks for exact (k = n / 10, and 1, 7, 15, 16 up to 300 rows): each column's values come out in order (a
// checksum that weighs each rank), and the rows between the tails hold the rest of the column. Integer values, so that
// every sum is exact whatever order the rows between the tails are in, and ties everywhere.
TEST(SortingNetworkTest, BlockedSortsAndTailsAreExactForEveryRowCountUpTo300AndBeyond) {
  struct Tails {
    size_t k;
  };
  // All ranks: the sum of (i + 1) * rows[i]. With tails: the same over the k lowest and k highest
  // ranks, plus 1e6 times the plain sum of the rows between them.
  auto weighted = [](const float* const* rows, size_t count, size_t len, double* out, const void* arg) {
    const size_t k = arg ? static_cast<const Tails*>(arg)->k : count;
    for (size_t c = 0; c < len; ++c) {
      double ranked = 0.0, middle = 0.0;
      for (size_t i = 0; i < count; ++i) {
        if (i < k || i + k >= count) {
          ranked += static_cast<double>(i + 1) * rows[i][c];
        } else {
          middle += rows[i][c];
        }
      }
      out[c] = ranked + 1e6 * middle;
    }
  };
  Rng rng(10);
  std::vector<size_t> sizes;
  for (size_t n = 1; n <= 300; ++n) sizes.push_back(n);
  for (size_t n : {513u, 1025u, 2049u}) sizes.push_back(n);  // merges up to 1024, 2048 and 4096 wires
  for (size_t n : sizes) {
    const size_t p = n <= 300 ? 37 : 9;  // four full columns of eight and a tail; one and a tail
    std::vector<std::vector<float>> data(n, std::vector<float>(p));
    std::vector<const float*> ptrs;
    for (auto& d : data) {
      for (float& x : d) x = static_cast<float>(static_cast<int>(rng.Below(61)) - 30);
      ptrs.push_back(d.data());
    }
    // Each column's values in order, and the checksums the reducer gives on them.
    std::vector<std::vector<float>> columns(p);
    auto want = [&](size_t c, const Tails* tails) {
      std::vector<const float*> rows;
      for (const float& v : columns[c]) rows.push_back(&v);
      double sum = 0.0;
      weighted(rows.data(), n, 1, &sum, tails);
      return sum;
    };
    for (size_t c = 0; c < p; ++c) {
      for (const auto& d : data) columns[c].push_back(d[c]);
      std::sort(columns[c].begin(), columns[c].end());
    }
    const std::vector<double> sorted = ReduceSortedCoordinates(ptrs, p, nullptr, AllRanks(n), weighted, nullptr);
    for (size_t c = 0; c < p; ++c) ASSERT_EQ(sorted[c], want(c, nullptr)) << "n " << n << " column " << c;
    // A trimmed mean's k = n / 10, and tails of 1, 7, 15 and 16 (from 32 rows up to 16 exact
    // ranks at each end take the merges of the lower and upper runs of 16 alone).
    std::vector<size_t> tail_sizes = {n / 10};
    for (size_t k : {1u, 7u, 15u, 16u}) {
      if (2 * k < n && n <= 300) tail_sizes.push_back(k);
    }
    for (size_t k : tail_sizes) {
      const Tails tails{k};
      std::vector<uint32_t> tail_ranks;
      for (size_t i = 0; i < tails.k; ++i) {
        tail_ranks.push_back(static_cast<uint32_t>(i));
        tail_ranks.push_back(static_cast<uint32_t>(n - 1 - i));
      }
      const std::vector<double> trimmed = ReduceSortedCoordinates(ptrs, p, nullptr, tail_ranks, weighted, &tails);
      for (size_t c = 0; c < p; ++c) {
        ASSERT_EQ(trimmed[c], want(c, &tails)) << "n " << n << " k " << k << " column " << c;
      }
    }
  }
}

}  // namespace
}  // namespace plexus
