#include "server/coordinator/federated_evaluation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

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

std::vector<std::string> Clients(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(std::string(1, static_cast<char>('a' + i)));
  return out;
}

// Who a campaign of `fe` for `version` hands tasks to, polled in the order a, b, c, ...
std::vector<std::string> Asked(FederatedEvaluation& fe, uint64_t version, int n) {
  std::vector<std::string> asked;
  for (const std::string& c : Clients(n)) {
    std::optional<Task> t = fe.TaskFor(c, 0);
    if (t && t->model_version == version) asked.push_back(c);
  }
  return asked;
}

TEST(FederatedEvaluationTest, EveryVthVersionIsEvaluatedByASampleOfTheKnownClients) {
  FederatedEvaluation fe = Every(2, 0.5);
  fe.OnPublished(1, "sha1", false, Clients(4), 0);
  for (const std::string& c : Clients(4)) EXPECT_FALSE(fe.TaskFor(c, 0).has_value());  // version 1 is not due
  fe.OnPublished(2, "sha2", false, Clients(4), 0);
  std::vector<std::string> asked;
  std::optional<Task> first;
  for (const std::string& c : Clients(4)) {
    std::optional<Task> t = fe.TaskFor(c, 10);
    if (!t) continue;
    EXPECT_TRUE(t->evaluate_only);
    EXPECT_EQ(t->model_version, 2u);
    EXPECT_EQ(t->model_sha256, "sha2");
    EXPECT_FALSE(fe.TaskFor(c, 10).has_value());  // asked once per version
    asked.push_back(c);
  }
  ASSERT_EQ(asked.size(), 2u);  // half of four clients
  ASSERT_TRUE(fe.Report(asked[0], "eval-v2-" + asked[0], Eval(0.9, 0.2, 100)).ok());
  EXPECT_TRUE(fe.Collect(20).empty());  // the second has not answered yet
  ASSERT_TRUE(fe.Report(asked[1], "eval-v2-" + asked[1], Eval(0.6, 0.8, 300)).ok());
  std::vector<RoundRecord> done = fe.Collect(20);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].model_version, 2u);
  EXPECT_DOUBLE_EQ(*done[0].federated_accuracy, (0.9 * 100 + 0.6 * 300) / 400);  // weighted by examples
  EXPECT_DOUBLE_EQ(*done[0].federated_loss, (0.2 * 100 + 0.8 * 300) / 400);
  EXPECT_EQ(done[0].federated_examples, 400);
  EXPECT_EQ(done[0].federated_clients, 2);
  EXPECT_TRUE(fe.Collect(30).empty());  // reported once
}

// The first clients to poll once took every evaluation: fast devices decided every version's
// figure. The sample is the seed's, whatever the order of polls, and over many versions every
// client evaluates about as often as the others.
TEST(FederatedEvaluationTest, TheSampleIsSeededNotTheFirstToPollAndFairOverVersions) {
  std::map<std::string, int> times;
  for (uint64_t v = 1; v <= 200; ++v) {
    FederatedEvaluation fe = Every(1, 0.25);
    fe.OnPublished(v, "s", false, Clients(8), 0);
    const std::vector<std::string> asked = Asked(fe, v, 8);
    ASSERT_EQ(asked.size(), 2u);
    // Another instance with the same seed, told the clients in another order and polled
    // backwards, samples the same two.
    FederatedEvaluation again = Every(1, 0.25);
    std::vector<std::string> reversed = Clients(8);
    std::reverse(reversed.begin(), reversed.end());
    again.OnPublished(v, "s", false, reversed, 0);
    std::vector<std::string> asked_again;
    for (const std::string& c : reversed) {
      if (again.TaskFor(c, 0)) asked_again.insert(asked_again.begin(), c);
    }
    EXPECT_EQ(asked_again, asked) << v;
    for (const std::string& c : asked) ++times[c];
  }
  // 400 tasks among 8 clients: 50 each on average; "a", polled first every time, is not favoured.
  for (const std::string& c : Clients(8)) {
    EXPECT_GE(times[c], 30) << c;
    EXPECT_LE(times[c], 70) << c;
  }
}

TEST(FederatedEvaluationTest, BadOrUnknownReportsChangeNothing) {
  FederatedEvaluation fe = Every(1, 1.0);
  fe.OnPublished(1, "s", false, Clients(1), 0);
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
  fe.OnPublished(1, "s", false, Clients(3), 0);
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

  fe.OnPublished(2, "s2", false, Clients(3), 2000);
  EXPECT_TRUE(fe.Collect(3000).empty());  // nobody answered: no figure
}

TEST(FederatedEvaluationTest, TheFinalVersionIsAlwaysEvaluatedAndHoldsItsClients) {
  FederatedEvaluation fe = Every(10, 0.5);
  fe.OnPublished(3, "s3", /*is_final=*/true, Clients(2), 0);
  EXPECT_TRUE(fe.final_pending());
  const std::vector<std::string> asked = Asked(fe, 3, 2);
  ASSERT_EQ(asked.size(), 1u);  // half of two
  const std::string other = asked[0] == "a" ? "b" : "a";
  EXPECT_TRUE(fe.Owes(asked[0]));  // asked, not answered
  EXPECT_FALSE(fe.Owes(other));    // not in the sample
  ASSERT_TRUE(fe.Report(asked[0], "eval-v3-" + asked[0], Eval(0.7, 0.6, 5)).ok());
  EXPECT_FALSE(fe.Owes(asked[0]));
  EXPECT_EQ(fe.Collect(1).size(), 1u);
  EXPECT_FALSE(fe.final_pending());

  FederatedEvaluation off = Every(0, 0.5);
  off.OnPublished(1, "s", true, Clients(2), 0);
  EXPECT_FALSE(off.TaskFor("a", 0).has_value());
  EXPECT_FALSE(off.final_pending());
  FederatedEvaluationOptions bad;
  bad.fraction = 0;
  EXPECT_FALSE(bad.Validate().ok());
}

}  // namespace
}  // namespace plexus
