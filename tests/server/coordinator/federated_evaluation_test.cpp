#include "server/coordinator/federated_evaluation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

Evaluation Eval(double accuracy, double loss, int64_t examples) {
  Evaluation e;
  e.accuracy = accuracy;
  e.loss = loss;
  e.examples = examples;
  return e;
}

FederatedEvaluation Every(int64_t v, double fraction) {
  FederatedEvaluationOptions o;
  o.every = v;
  o.fraction = fraction;
  o.deadline_ms = 1000;
  return FederatedEvaluation(o);
}

TEST(FederatedEvaluationTest, EveryVthVersionIsEvaluatedByTheFirstClientsThatPoll) {
  FederatedEvaluation fe = Every(2, 0.5);
  fe.OnPublished(1, "sha1", false, 4, 0);
  EXPECT_FALSE(fe.TaskFor("a", 0).has_value());  // version 1 is not due
  fe.OnPublished(2, "sha2", false, 4, 0);
  std::optional<Task> a = fe.TaskFor("a", 10);
  ASSERT_TRUE(a.has_value());
  EXPECT_TRUE(a->evaluate_only);
  EXPECT_EQ(a->model_version, 2u);
  EXPECT_EQ(a->model_sha256, "sha2");
  EXPECT_FALSE(fe.TaskFor("a", 10).has_value());  // asked once per version
  ASSERT_TRUE(fe.TaskFor("b", 10).has_value());
  EXPECT_FALSE(fe.TaskFor("c", 10).has_value());  // half of four clients

  ASSERT_TRUE(fe.Report("a", a->task_id, Eval(0.9, 0.2, 100)).ok());
  EXPECT_TRUE(fe.Collect(20).empty());  // b has not answered yet
  ASSERT_TRUE(fe.Report("b", "eval-v2-b", Eval(0.6, 0.8, 300)).ok());
  std::vector<RoundRecord> done = fe.Collect(20);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].model_version, 2u);
  EXPECT_DOUBLE_EQ(*done[0].federated_accuracy, (0.9 * 100 + 0.6 * 300) / 400);  // weighted by examples
  EXPECT_DOUBLE_EQ(*done[0].federated_loss, (0.2 * 100 + 0.8 * 300) / 400);
  EXPECT_EQ(done[0].federated_examples, 400);
  EXPECT_EQ(done[0].federated_clients, 2);
  EXPECT_TRUE(fe.Collect(30).empty());  // reported once
}

TEST(FederatedEvaluationTest, BadOrUnknownReportsChangeNothing) {
  FederatedEvaluation fe = Every(1, 1.0);
  fe.OnPublished(1, "s", false, 1, 0);
  std::optional<Task> t = fe.TaskFor("a", 0);
  ASSERT_TRUE(t.has_value());
  EXPECT_THAT(fe.Report("b", t->task_id, Eval(0.5, 0.5, 10)), StatusIs(StatusCode::kNotFound, "no open"));
  EXPECT_THAT(fe.Report("a", "eval-v7-a", Eval(0.5, 0.5, 10)), StatusIs(StatusCode::kNotFound, "no open"));
  EXPECT_THAT(fe.Report("a", t->task_id, Eval(NAN, 0.5, 10)), StatusIs(StatusCode::kInvalidArgument, "accuracy"));
  EXPECT_THAT(fe.Report("a", t->task_id, Eval(1.5, 0.5, 10)), StatusIs(StatusCode::kInvalidArgument, "accuracy"));
  EXPECT_THAT(fe.Report("a", t->task_id, Eval(0.5, 0.5, -1)), StatusIs(StatusCode::kInvalidArgument, "count"));
  EXPECT_TRUE(fe.Collect(10).empty());  // still open: nothing valid came
  ASSERT_TRUE(fe.Report("a", t->task_id, Eval(0.25, 1.0, 8)).ok());
  EXPECT_THAT(fe.Report("a", t->task_id, Eval(0.5, 0.5, 8)), StatusIs(StatusCode::kNotFound, "no open"));
  std::vector<RoundRecord> done = fe.Collect(10);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_DOUBLE_EQ(*done[0].federated_accuracy, 0.25);
}

TEST(FederatedEvaluationTest, TheDeadlineClosesWithTheReportsInAndEmptyOnesWeighNothing) {
  FederatedEvaluation fe = Every(1, 1.0);
  fe.OnPublished(1, "s", false, 3, 0);
  ASSERT_TRUE(fe.TaskFor("a", 0).has_value());
  ASSERT_TRUE(fe.TaskFor("b", 0).has_value());
  ASSERT_TRUE(fe.Report("a", "eval-v1-a", Eval(0.0, 0.0, 0)).ok());  // no held-out data
  ASSERT_TRUE(fe.Report("b", "eval-v1-b", Eval(0.8, 0.4, 20)).ok());
  EXPECT_TRUE(fe.Collect(999).empty());             // c may still come
  EXPECT_FALSE(fe.TaskFor("c", 1000).has_value());  // too late
  std::vector<RoundRecord> done = fe.Collect(1000);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_DOUBLE_EQ(*done[0].federated_accuracy, 0.8);
  EXPECT_EQ(done[0].federated_clients, 1);

  fe.OnPublished(2, "s2", false, 3, 2000);
  EXPECT_TRUE(fe.Collect(3000).empty());  // nobody answered: no figure
}

TEST(FederatedEvaluationTest, TheFinalVersionIsAlwaysEvaluatedAndHoldsItsClients) {
  FederatedEvaluation fe = Every(10, 0.5);
  fe.OnPublished(3, "s3", /*is_final=*/true, 2, 0);
  EXPECT_TRUE(fe.final_pending());
  EXPECT_TRUE(fe.Owes("a"));  // a slot is free: every client may still take it
  std::optional<Task> t = fe.TaskFor("a", 0);
  ASSERT_TRUE(t.has_value());
  EXPECT_TRUE(fe.Owes("a"));   // asked, not answered
  EXPECT_FALSE(fe.Owes("b"));  // the one slot is taken
  ASSERT_TRUE(fe.Report("a", t->task_id, Eval(0.7, 0.6, 5)).ok());
  EXPECT_FALSE(fe.Owes("a"));
  EXPECT_EQ(fe.Collect(1).size(), 1u);
  EXPECT_FALSE(fe.final_pending());

  FederatedEvaluation off = Every(0, 0.5);
  off.OnPublished(1, "s", true, 2, 0);
  EXPECT_FALSE(off.TaskFor("a", 0).has_value());
  EXPECT_FALSE(off.final_pending());
  FederatedEvaluationOptions bad;
  bad.fraction = 0;
  EXPECT_FALSE(bad.Validate().ok());
}

}  // namespace
}  // namespace plexus
