// The client's decisions, without transport or trainer: each event in, the step out.
#include "client/client_session.h"

#include <gtest/gtest.h>

namespace plexus {
namespace {

using Kind = ClientStep::Kind;
using Pause = ClientStep::Pause;

Task TrainingTask(const std::string& id) {
  Task t;
  t.task_id = id;
  t.model_version = 3;
  return t;
}

PollAnswer TaskAnswer(const std::string& id) {
  PollAnswer a;
  a.kind = PollAnswer::Kind::kTask;
  a.task = TrainingTask(id);
  return a;
}

PollAnswer WaitAnswer(int64_t retry_after_ms) {
  PollAnswer a;
  a.kind = PollAnswer::Kind::kWait;
  a.retry_after_ms = retry_after_ms;
  return a;
}

UploadAck Acknowledged() { return UploadAck{7, std::nullopt}; }

class ClientSessionTest : public ::testing::Test {
 protected:
  ClientSessionTest() : session_(Options()) {}
  static ClientSessionOptions Options() {
    ClientSessionOptions o;
    o.backoff_initial_ms = 100;
    o.backoff_max_ms = 800;
    o.give_up_after_ms = 10000;
    o.seed = 5;
    return o;
  }
  void Join() {
    ASSERT_EQ(session_.Start().kind, Kind::kJoin);
    const ClientStep s = session_.JoinAnswered(JoinReply{"c-1", "mlp"}, 0);
    ASSERT_EQ(s.kind, Kind::kPoll);
    ASSERT_EQ(s.after_ms, 0);
  }
  ClientSession session_;
};

TEST_F(ClientSessionTest, JoinsThenTrainsWhatThePollHandsOutAndUploadsIt) {
  Join();
  EXPECT_EQ(session_.client_id(), "c-1");
  const ClientStep train = session_.PollAnswered(TaskAnswer("t1"), 0);
  ASSERT_EQ(train.kind, Kind::kTrain);
  EXPECT_EQ(train.task.task_id, "t1");
  const ClientStep upload = ClientSession::Trained();
  EXPECT_EQ(upload.kind, Kind::kUpload);
  EXPECT_FALSE(upload.resume);
  const ClientStep next = session_.UploadAnswered("t1", Acknowledged(), 0);
  EXPECT_EQ(next.kind, Kind::kPoll);
  EXPECT_EQ(session_.summary().tasks_completed, 1);
  EXPECT_EQ(session_.PollAnswered(PollAnswer{PollAnswer::Kind::kFinished, {}, 0}, 0).kind, Kind::kDone);
}

TEST_F(ClientSessionTest, TheNextTaskInAnUploadsReplyIsTakenWithoutAPoll) {
  Join();
  UploadAck ack = Acknowledged();
  ack.next = TaskAnswer("t2");
  const ClientStep next = session_.UploadAnswered("t1", ack, 0);
  ASSERT_EQ(next.kind, Kind::kTrain);
  EXPECT_EQ(next.task.task_id, "t2");
}

TEST_F(ClientSessionTest, AServerWaitIsHonouredUpToFiveSecondsAndMarkedAsTheServers) {
  Join();
  ClientStep s = session_.PollAnswered(WaitAnswer(1200), 0);
  EXPECT_EQ(s.kind, Kind::kPoll);
  EXPECT_EQ(s.after_ms, 1200);
  EXPECT_EQ(s.pause, Pause::kServerSaidWait);
  EXPECT_EQ(session_.PollAnswered(WaitAnswer(60000), 0).after_ms, 5000);
  EXPECT_EQ(session_.PollAnswered(WaitAnswer(-3), 0).after_ms, 0);
  EXPECT_TRUE(session_.at_rest());
}

TEST_F(ClientSessionTest, EvaluationTasksAreEvaluatedAndAReportIsRetriedWhileTransient) {
  Join();
  PollAnswer a = TaskAnswer("e1");
  a.task.evaluate_only = true;
  ASSERT_EQ(session_.PollAnswered(a, 0).kind, Kind::kEvaluate);
  const ClientStep again = session_.EvaluationReported("e1", UnavailableError("down"), 0);
  EXPECT_EQ(again.kind, Kind::kReport);
  EXPECT_GT(again.after_ms, 0);
  EXPECT_EQ(session_.EvaluationReported("e1", Status::Ok(), 10).kind, Kind::kPoll);
  EXPECT_EQ(session_.summary().evaluations, 1);
  EXPECT_EQ(session_.EvaluationReported("e2", FailedPreconditionError("closed"), 20).kind, Kind::kPoll);
  EXPECT_EQ(session_.summary().evaluations, 1);
}

TEST_F(ClientSessionTest, ATaskWhoseUpdateWasRefusedIsNotTrainedAgain) {
  Join();
  const ClientStep first = session_.UploadAnswered("t1", FailedPreconditionError("round 1 is closed"), 0);
  EXPECT_EQ(first.kind, Kind::kPoll);
  EXPECT_EQ(first.after_ms, 0);  // one refusal: other work at once
  EXPECT_EQ(session_.summary().tasks_refused, 1);
  EXPECT_FALSE(session_.at_rest());
  const ClientStep same = session_.PollAnswered(TaskAnswer("t1"), 0);
  EXPECT_EQ(same.kind, Kind::kPoll);
  EXPECT_EQ(same.after_ms, 1000);
  EXPECT_EQ(same.pause, Pause::kRefusedTask);
  EXPECT_EQ(session_.PollAnswered(TaskAnswer("t2"), 0).kind, Kind::kTrain);
}

TEST_F(ClientSessionTest, RefusalsForTheSameReasonInARowDoubleTheWaitAndAnAcceptanceEndsTheStreak) {
  Join();
  EXPECT_EQ(session_.UploadAnswered("t1", FailedPreconditionError("norm 12.5 above bound 3.1"), 0).after_ms, 0);
  const ClientStep second = session_.UploadAnswered("t2", FailedPreconditionError("norm 19.0 above bound 3.4"), 0);
  EXPECT_EQ(second.after_ms, 2000);
  EXPECT_EQ(second.pause, Pause::kRefusals);
  EXPECT_EQ(second.say, ClientStep::Say::kError);
  EXPECT_EQ(session_.UploadAnswered("t3", FailedPreconditionError("norm 7 above bound 3"), 0).after_ms, 4000);
  // Another reason starts a new streak.
  EXPECT_EQ(session_.UploadAnswered("t4", NotFoundError("task t4 expired"), 0).after_ms, 0);
  EXPECT_EQ(session_.UploadAnswered("t5", NotFoundError("task t5 expired"), 0).after_ms, 2000);
  EXPECT_EQ(session_.UploadAnswered("t6", Acknowledged(), 0).kind, Kind::kPoll);
  EXPECT_EQ(session_.UploadAnswered("t7", NotFoundError("task t7 expired"), 0).after_ms, 0);
  EXPECT_EQ(session_.summary().tasks_refused, 6);
}

TEST_F(ClientSessionTest, TransientFailuresBackOffExponentiallyWithJitterThenGiveUp) {
  Join();
  int64_t now = 0;
  int64_t previous_cap = 0;
  for (int attempt = 0; attempt < 4; ++attempt) {
    const ClientStep s = session_.PollAnswered(UnavailableError("connection refused"), now);
    ASSERT_EQ(s.kind, Kind::kPoll);
    EXPECT_EQ(s.pause, Pause::kBackoff);
    const int64_t cap = std::min<int64_t>(800, 100LL << attempt);
    EXPECT_GE(s.after_ms, cap / 2);
    EXPECT_LE(s.after_ms, cap);
    EXPECT_GE(cap, previous_cap);
    previous_cap = cap;
    now += s.after_ms;
  }
  EXPECT_FALSE(session_.at_rest());
  const ClientStep gone = session_.PollAnswered(DeadlineExceededError("slow"), 9900);
  ASSERT_EQ(gone.kind, Kind::kFail);
  EXPECT_EQ(gone.error.code(), StatusCode::kUnavailable);
  EXPECT_NE(gone.error.message().find("giving up"), std::string::npos);
}

TEST_F(ClientSessionTest, AnAnswerEndsTheStretchOfFailures) {
  Join();
  session_.PollAnswered(UnavailableError("down"), 0);
  session_.PollAnswered(UnavailableError("down"), 9000);
  ASSERT_EQ(session_.PollAnswered(WaitAnswer(100), 9500).kind, Kind::kPoll);
  EXPECT_TRUE(session_.at_rest());
  // A new stretch starts from its own first failure: far past give_up_after_ms from the old one.
  const ClientStep s = session_.PollAnswered(UnavailableError("down"), 30000);
  EXPECT_EQ(s.kind, Kind::kPoll);
  EXPECT_LE(s.after_ms, 100);
}

TEST_F(ClientSessionTest, AForgottenClientJoinsAgainAndOtherErrorsStopIt) {
  Join();
  EXPECT_EQ(session_.PollAnswered(NotFoundError("unknown client"), 0).kind, Kind::kJoin);
  const ClientStep bad = session_.PollAnswered(PermissionDeniedError("no certificate"), 0);
  ASSERT_EQ(bad.kind, Kind::kFail);
  EXPECT_EQ(bad.error.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(session_.JoinAnswered(InvalidArgumentError("bad id"), 0).kind, Kind::kFail);
  EXPECT_EQ(session_.JoinAnswered(UnavailableError("down"), 0).kind, Kind::kJoin);
}

TEST_F(ClientSessionTest, AnUploadThatFailsInTransitIsSentAgainAsAResume) {
  Join();
  const ClientStep s = session_.UploadAnswered("t1", UnavailableError("reset"), 0);
  EXPECT_EQ(s.kind, Kind::kUpload);
  EXPECT_TRUE(s.resume);
  EXPECT_GT(s.after_ms, 0);
  EXPECT_EQ(session_.summary().tasks_refused, 0);
  EXPECT_TRUE(session_.ResumeKeptUpload().resume);
  EXPECT_EQ(session_.summary().uploads_resumed_after_restart, 1);
}

TEST_F(ClientSessionTest, ATaskWithoutItsModelIsSkippedDivergedTrainingCountsAsFailedElseTheClientStops) {
  Join();
  EXPECT_EQ(session_.TaskFailed(TrainingTask("t1"), DataLossError("sha mismatch")).kind, Kind::kPoll);
  EXPECT_EQ(session_.TaskFailed(TrainingTask("t2"), NotFoundError("version gone")).kind, Kind::kPoll);
  EXPECT_EQ(session_.summary().tasks_failed, 0);
  EXPECT_EQ(session_.TaskFailed(TrainingTask("t3"), AbortedError("loss is NaN")).kind, Kind::kPoll);
  EXPECT_EQ(session_.summary().tasks_failed, 1);
  const ClientStep stop = session_.TaskFailed(TrainingTask("t4"), InternalError("out of memory"));
  ASSERT_EQ(stop.kind, Kind::kFail);
  EXPECT_NE(stop.error.message().find("t4"), std::string::npos);
}

TEST(ClientSessionRestTest, ASessionAtRestDecidesLikeANewOne) {
  ClientSessionOptions o;
  o.seed = 9;
  ClientSession used(o, "sim-1");
  ASSERT_EQ(used.UploadAnswered("t1", UploadAck{1, std::nullopt}, 0).kind, Kind::kPoll);
  used.PollAnswered(UnavailableError("down"), 100);
  used.PollAnswered(WaitAnswer(10), 200);
  ASSERT_TRUE(used.at_rest());
  ClientSession fresh(o, "sim-1");
  for (int64_t now : {1000, 1400, 2100}) {
    const ClientStep a = used.PollAnswered(UnavailableError("down"), now);
    const ClientStep b = fresh.PollAnswered(UnavailableError("down"), now);
    EXPECT_EQ(a.after_ms, b.after_ms);
    EXPECT_EQ(a.kind, b.kind);
  }
}

}  // namespace
}  // namespace plexus
