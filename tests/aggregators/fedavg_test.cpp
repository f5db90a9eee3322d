#include <cmath>

#include "aggregators/registry.h"
#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

ModelState Vec(std::vector<float> v, uint64_t version = 0) {
  ModelState m = *ModelState::Create({{"w", {static_cast<int64_t>(v.size())}}}, version);
  std::copy(v.begin(), v.end(), m.data().begin());
  return m;
}

Update Delta(std::string client, std::vector<float> d, int64_t examples) {
  Update u;
  u.client_id = std::move(client);
  u.num_examples = examples;
  u.delta = Vec(std::move(d));
  return u;
}

TEST(FedAvgTest, WeightsByExamples) {
  auto agg = *MakeAggregator("fedavg", nullptr);
  ASSERT_OK(agg->Begin(Vec({1, 1}, 3)));
  ASSERT_OK(agg->Fold(Delta("a", {1, 0}, 1)));
  ASSERT_OK(agg->Fold(Delta("b", {4, 3}, 3)));
  Result<ModelState> out = agg->Finalize();
  ASSERT_OK(out);
  // base + (1*[1,0] + 3*[4,3]) / 4 = [1 + 13/4, 1 + 9/4]
  EXPECT_FLOAT_EQ(out->data()[0], 4.25f);
  EXPECT_FLOAT_EQ(out->data()[1], 3.25f);
  EXPECT_EQ(out->version(), 4u);
}

TEST(FedAvgTest, UniformIgnoresExampleCounts) {
  auto agg = *MakeAggregator("fedavg:weighted=false", nullptr);
  ASSERT_OK(agg->Begin(Vec({0})));
  ASSERT_OK(agg->Fold(Delta("a", {2}, 1)));
  ASSERT_OK(agg->Fold(Delta("b", {4}, 100)));
  EXPECT_FLOAT_EQ(agg->Finalize()->data()[0], 3.0f);
  EXPECT_EQ(agg->Describe(), "fedavg(weighted=false)");
}

TEST(FedAvgTest, RefusedUpdatesChangeNothing) {
  auto agg = *MakeAggregator("fedavg", nullptr);
  ASSERT_OK(agg->Begin(Vec({0, 0})));
  ASSERT_OK(agg->Fold(Delta("a", {2, 2}, 1)));
  EXPECT_THAT(agg->Fold(Delta("nan", {std::nanf(""), 1}, 1)), StatusIs(StatusCode::kInvalidArgument, "non-finite"));
  EXPECT_THAT(agg->Fold(Delta("inf", {1, INFINITY}, 1)), StatusIs(StatusCode::kInvalidArgument, "non-finite"));
  EXPECT_THAT(agg->Fold(Delta("short", {1}, 1)), StatusIs(StatusCode::kInvalidArgument, "shape [1], expected [2]"));
  EXPECT_THAT(agg->Fold(Delta("zero", {1, 1}, 0)), StatusIs(StatusCode::kInvalidArgument, "positive count"));
  EXPECT_EQ(agg->num_folded(), 1u);
  Result<ModelState> out = agg->Finalize();
  EXPECT_FLOAT_EQ(out->data()[0], 2.0f);
}

TEST(FedAvgTest, NothingFoldedIsAnError) {
  auto agg = *MakeAggregator("fedavg", nullptr);
  EXPECT_THAT(agg->Fold(Delta("a", {1}, 1)), StatusIs(StatusCode::kFailedPrecondition, "before Begin"));
  ASSERT_OK(agg->Begin(Vec({0})));
  EXPECT_THAT(agg->Finalize(), StatusIs(StatusCode::kFailedPrecondition, "no updates"));
}

TEST(FedAvgTest, ThreadedFoldMatchesSingleThreaded) {
  const size_t n = 300000;
  std::vector<float> base(n), d1(n), d2(n);
  for (size_t i = 0; i < n; ++i) {
    base[i] = std::sin(static_cast<float>(i));
    d1[i] = std::cos(static_cast<float>(i));
    d2[i] = 0.001f * static_cast<float>(i % 97);
  }
  ThreadPool pool(2);
  auto a = *MakeAggregator("fedavg", nullptr);
  auto b = *MakeAggregator("fedavg", &pool);
  for (auto* agg : {a.get(), b.get()}) {
    ASSERT_OK(agg->Begin(Vec(base)));
    ASSERT_OK(agg->Fold(Delta("x", d1, 3)));
    ASSERT_OK(agg->Fold(Delta("y", d2, 5)));
  }
  EXPECT_EQ(*a->Finalize(), *b->Finalize());
}

TEST(FedAvgTest, IdenticalInputsGiveThatInput) {
  auto agg = *MakeAggregator("fedavg", nullptr);
  ASSERT_OK(agg->Begin(Vec({0.5f, -1.0f})));
  for (int i = 1; i <= 5; ++i) ASSERT_OK(agg->Fold(Delta("c" + std::to_string(i), {0.25f, 0.75f}, i)));
  ModelState out = *agg->Finalize();
  EXPECT_FLOAT_EQ(out.data()[0], 0.75f);
  EXPECT_FLOAT_EQ(out.data()[1], -0.25f);
}

}  // namespace
}  // namespace plexus
