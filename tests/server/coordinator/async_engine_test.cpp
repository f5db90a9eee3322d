#include "server/coordinator/async_engine.h"

#include <cmath>

#include "aggregators/update_bundle.h"
#include "compression/codec.h"
#include "server/coordinator/sync_engine.h"
#include "server/store/memory_store.h"
#include "tests/testing/raw_coded_delta.h"
#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;
using Kind = PollAnswer::Kind;

ModelState Initial() {
  ModelState m = *ModelState::Create({{"w", {1}}});
  m.data()[0] = 1.0f;
  return m;
}

class AsyncEngineTest : public ::testing::Test {
 protected:
  void Open(AsyncOptions o) {
    auto e = AsyncEngine::Open(o, Initial(), &store_, &clock_, nullptr, nullptr);
    ASSERT_OK(e);
    engine_ = std::move(e).value();
    for (const char* id : {"a", "b", "c", "slow"}) ASSERT_OK(engine_->Join({id, 10, "test"}));
  }
  Task TaskOf(const std::string& client) {
    Result<PollAnswer> a = engine_->Poll(client);
    EXPECT_OK(a);
    EXPECT_EQ(a->kind, Kind::kTask) << client;
    return a->task;
  }
  static Update UpdateOf(const std::string& client, const Task& t, float delta) {
    Update u;
    u.client_id = client;
    u.task_id = t.task_id;
    u.base_version = t.model_version;
    u.num_examples = 10;
    u.delta = ModelState::ZerosLike(Initial());
    u.delta.data()[0] = delta;
    return u;
  }
  Status Report(const std::string& client, const Task& t, float delta) {
    return engine_->Submit(UpdateOf(client, t, delta));
  }
  float W() const { return engine_->model().data()[0]; }
  // Semi-async: "a" (1 ms a step) and "slow" (4 ms) are measured by a first task each, then
  // grouped to end together at 500; "a" arrives at 500. Returns slow's open task.
  Task GroupWhereOnlyAArrived() {
    Task a = TaskOf("a"), slow = TaskOf("slow");
    clock_.SetMs(100);
    EXPECT_OK(Report("a", a, 2.0f));
    clock_.SetMs(400);
    EXPECT_OK(Report("slow", slow, 2.0f));
    a = TaskOf("a");
    slow = TaskOf("slow");
    clock_.SetMs(500);
    EXPECT_OK(Report("a", a, 1.0f));
    return slow;
  }

  ManualClock clock_;
  MemoryStore store_;
  std::unique_ptr<AsyncEngine> engine_;
};

AsyncOptions Options(int64_t rounds, int64_t k, double lr, const std::string& staleness) {
  AsyncOptions o;
  o.rounds = rounds;
  o.buffer_size = k;
  o.server_lr = lr;
  o.staleness = staleness;
  return o;
}

TEST_F(AsyncEngineTest, FedAsyncAppliesAlphaTimesStalenessWeight) {
  Open(Options(5, 1, 0.5, "poly:a=1"));
  Task ta = TaskOf("a"), tb = TaskOf("b");
  ASSERT_OK(Report("a", ta, 2.0f));  // tau 0, s = 1: 1 + 0.5 * 2
  EXPECT_FLOAT_EQ(W(), 2.0f);
  EXPECT_EQ(engine_->model().version(), 1u);
  ASSERT_OK(Report("b", tb, 4.0f));  // tau 1, s = 1/2: 2 + 0.5 * 0.5 * 4
  EXPECT_FLOAT_EQ(W(), 3.0f);
  EXPECT_EQ(engine_->model().version(), 2u);
  EXPECT_EQ(store_.ListRounds()->size(), 2u);
}

// Submit in three steps (the server logs updates without its lock): an admitted update is logged
// by Persist and neither acknowledged nor folded before Complete; one whose Persist ends after the
// federation's last version was published is refused (no version would merge it), not acknowledged.
TEST_F(AsyncEngineTest, AnUpdateIsFoldedOnlyOnceLoggedAndRefusedWhenTheFederationFinishedMeanwhile) {
  Open(Options(1, 1, 1.0, "constant"));
  Task ta = TaskOf("a"), tb = TaskOf("b");
  Result<AdmittedUpdate> a = engine_->Admit(UpdateOf("a", ta, 2.0f));
  Result<AdmittedUpdate> b = engine_->Admit(UpdateOf("b", tb, 5.0f));
  ASSERT_OK(a);
  ASSERT_OK(b);
  ASSERT_OK(engine_->Persist(*a));
  ASSERT_OK(engine_->Persist(*b));
  EXPECT_EQ(store_.ListLoggedUpdates()->size(), 2u);
  EXPECT_FALSE(engine_->Acknowledged("a", ta.task_id));
  EXPECT_EQ(engine_->model().version(), 0u);
  ASSERT_OK(engine_->Complete(std::move(a).value(), Status::Ok()));
  EXPECT_TRUE(engine_->Acknowledged("a", ta.task_id));
  EXPECT_TRUE(engine_->finished());
  EXPECT_FLOAT_EQ(W(), 3.0f);
  EXPECT_THAT(engine_->Complete(std::move(b).value(), Status::Ok()),
              StatusIs(StatusCode::kFailedPrecondition, "finished while the update"));
  EXPECT_FALSE(engine_->Acknowledged("b", tb.task_id));
  EXPECT_FLOAT_EQ(W(), 3.0f);
}

TEST_F(AsyncEngineTest, FedBuffPublishesEveryKUpdates) {
  Open(Options(5, 3, 1.0, "constant"));
  ASSERT_OK(Report("a", TaskOf("a"), 3.0f));
  ASSERT_OK(Report("b", TaskOf("b"), 6.0f));
  EXPECT_EQ(engine_->model().version(), 0u);
  EXPECT_EQ(engine_->status().round_received, 2);
  ASSERT_OK(Report("c", TaskOf("c"), 0.0f));
  EXPECT_EQ(engine_->model().version(), 1u);
  EXPECT_FLOAT_EQ(W(), 4.0f);  // 1 + (3 + 6 + 0) / 3
  ASSERT_OK(Report("a", TaskOf("a"), 3.0f));
  EXPECT_EQ(engine_->model().version(), 1u);
}

TEST_F(AsyncEngineTest, NonFiniteMetricsAreRefusedAndTheVersionStillPublishes) {
  Open(Options(5, 2, 1.0, "constant"));
  Task ta = TaskOf("a"), tb = TaskOf("b");
  Update u;
  u.client_id = "a";
  u.task_id = ta.task_id;
  u.base_version = ta.model_version;
  u.num_examples = 10;
  u.delta = ModelState::ZerosLike(Initial());
  u.metrics["train_loss"] = std::nan("");
  EXPECT_THAT(engine_->Submit(u), StatusIs(StatusCode::kInvalidArgument, "finite"));
  EXPECT_EQ(engine_->status().round_received, 0);
  u.metrics["train_loss"] = 0.25;
  ASSERT_OK(engine_->Submit(u));
  ASSERT_OK(Report("b", tb, 2.0f));
  EXPECT_EQ(engine_->model().version(), 1u);
  EXPECT_DOUBLE_EQ(store_.ListRounds()->back().mean_train_loss, 0.25);
}

TEST_F(AsyncEngineTest, ANonFiniteAggregateIsNotPublishedAndTheNextBufferStartsFromTheHead) {
  Open(Options(5, 1, 1.0, "constant"));
  ASSERT_OK(Report("a", TaskOf("a"), 3e38f));  // 1 + 3e38: finite
  ASSERT_EQ(engine_->model().version(), 1u);
  ASSERT_OK(Report("b", TaskOf("b"), 3e38f));  // 6e38 is not
  EXPECT_EQ(engine_->model().version(), 1u);
  EXPECT_EQ(engine_->status().aggregates_nonfinite, 1);
  EXPECT_EQ(store_.ListRounds()->size(), 1u);
  ASSERT_OK(Report("c", TaskOf("c"), -3e38f));  // from version 1 again
  EXPECT_EQ(engine_->model().version(), 2u);
  EXPECT_TRUE(AllFinite(engine_->model().data()));
  EXPECT_LT(std::fabs(W()), 1e37f);
}

// With server momentum the refused aggregate's velocity goes too (SyncEngineTest's case): from
// version 1's velocity, 3e38, a report of -3e38 publishes; from the refused one it would overflow.
TEST_F(AsyncEngineTest, ARefusedAggregateLeavesTheServerMomentumOfTheHead) {
  AsyncOptions o = Options(5, 1, 1.0, "constant");
  o.strategy = "fedavgm:momentum=0.9";
  Open(o);
  ASSERT_OK(Report("a", TaskOf("a"), 3e38f));
  ASSERT_EQ(engine_->model().version(), 1u);
  ASSERT_OK(Report("b", TaskOf("b"), 3e38f));
  ASSERT_EQ(engine_->status().aggregates_nonfinite, 1);
  ASSERT_OK(Report("c", TaskOf("c"), -3e38f));
  EXPECT_EQ(engine_->model().version(), 2u);
  EXPECT_TRUE(AllFinite(engine_->model().data()));
}

TEST_F(AsyncEngineTest, ABufferSmallerThanTheStrategyNeedsIsRefusedAtOpen) {
  AsyncOptions o = Options(5, 4, 1.0, "constant");
  o.strategy = "multikrum:f=1";
  EXPECT_THAT(AsyncEngine::Open(o, Initial(), &store_, &clock_, nullptr, nullptr).status(),
              StatusIs(StatusCode::kInvalidArgument, "buffer-size is 4"));
  o.buffer_size = 5;
  EXPECT_OK(AsyncEngine::Open(o, Initial(), &store_, &clock_, nullptr, nullptr));
}

TEST_F(AsyncEngineTest, FastClientsNeverWaitForSlowOnes) {
  Open(Options(10, 1, 1.0, "constant"));
  Task slow = TaskOf("slow");
  for (int i = 0; i < 3; ++i) ASSERT_OK(Report("a", TaskOf("a"), 1.0f));
  EXPECT_EQ(engine_->model().version(), 3u);  // three versions while "slow" trains one task
  ASSERT_OK(Report("slow", slow, 1.0f));      // staleness 3, within the default bound
  EXPECT_EQ(engine_->model().version(), 4u);
}

TEST_F(AsyncEngineTest, UpdatesBeyondTheStalenessBoundAreRefused) {
  AsyncOptions o = Options(10, 1, 1.0, "constant");
  o.max_staleness = 1;
  Open(o);
  Task slow = TaskOf("slow");
  ASSERT_OK(Report("a", TaskOf("a"), 1.0f));
  ASSERT_OK(Report("a", TaskOf("a"), 1.0f));
  const float before = W();
  EXPECT_THAT(Report("slow", slow, 100.0f),
              StatusIs(StatusCode::kFailedPrecondition, "2 versions stale (the limit is 1)"));
  EXPECT_FLOAT_EQ(W(), before);
  EXPECT_EQ(engine_->status().updates_stale, 1);
  // The refused task is over: the slow client gets a fresh one on the current model.
  EXPECT_EQ(TaskOf("slow").model_version, engine_->model().version());
}

TEST_F(AsyncEngineTest, ConcurrencyIsBounded) {
  AsyncOptions o = Options(10, 1, 1.0, "constant");
  o.max_concurrency = 2;
  Open(o);
  Task ta = TaskOf("a");
  TaskOf("b");
  EXPECT_EQ(engine_->Poll("c")->kind, Kind::kWait);
  ASSERT_OK(Report("a", ta, 1.0f));
  EXPECT_EQ(engine_->Poll("c")->kind, Kind::kTask);
}

TEST_F(AsyncEngineTest, RefusalsAndExpiry) {
  AsyncOptions o = Options(1, 1, 1.0, "constant");
  o.task_timeout_ms = 1000;
  Open(o);
  Task ta = TaskOf("a");
  EXPECT_THAT(Report("b", ta, 1.0f), StatusIs(StatusCode::kPermissionDenied, "another client"));
  Task bad = ta;
  bad.task_id = "v0n99-a";
  EXPECT_THAT(Report("a", bad, 1.0f), StatusIs(StatusCode::kNotFound, "unknown task id"));
  EXPECT_THAT(Report("a", ta, NAN), StatusIs(StatusCode::kInvalidArgument, "non-finite"));
  Task again = TaskOf("a");
  clock_.AdvanceMs(1000);
  ASSERT_OK(engine_->Tick());
  EXPECT_THAT(Report("a", again, 1.0f), StatusIs(StatusCode::kNotFound, "expired"));
  ASSERT_OK(Report("a", TaskOf("a"), 1.0f));
  EXPECT_TRUE(engine_->finished());
  EXPECT_EQ(engine_->Poll("a")->kind, Kind::kFinished);
  EXPECT_EQ(engine_->status().mode, "async");
}

TEST_F(AsyncEngineTest, ResumesFromTheStore) {
  Open(Options(5, 1, 1.0, "constant"));
  ASSERT_OK(Report("a", TaskOf("a"), 1.0f));
  engine_.reset();
  auto e = *AsyncEngine::Open(Options(5, 1, 1.0, "constant"), Initial(), &store_, &clock_, nullptr, nullptr);
  EXPECT_EQ(e->model().version(), 1u);
  EXPECT_EQ(e->Poll("a")->kind, Kind::kTask);  // a known client
}

// The merge strategy's state goes with each version and comes back with a restart: DP-FTRL's
// count of who contributed to the current tree survives it, so a client that already gave its
// one contribution gets no task (it waits) before and after the restart, until the tree restarts.
TEST_F(AsyncEngineTest, TheStrategysStateSurvivesARestart) {
  AsyncOptions o = Options(6, 1, 1.0, "constant");
  o.strategy = "dp_ftrl:clip=10,noise=0,expected=1,restart=2,participations=1";
  Open(o);
  ASSERT_OK(Report("a", TaskOf("a"), 1.0f));
  EXPECT_EQ(engine_->model().version(), 1u);
  EXPECT_EQ(engine_->Poll("a")->kind, Kind::kWait);
  engine_.reset();
  auto e = *AsyncEngine::Open(o, Initial(), &store_, &clock_, nullptr, nullptr);
  EXPECT_EQ(e->Poll("a")->kind, Kind::kWait);
  Result<PollAnswer> b = e->Poll("b");
  ASSERT_EQ(b->kind, Kind::kTask);
  Update u;
  u.client_id = "b";
  u.task_id = b->task.task_id;
  u.base_version = b->task.model_version;
  u.num_examples = 1;
  u.delta = ModelState::ZerosLike(Initial());
  ASSERT_OK(e->Submit(u));
  EXPECT_EQ(e->model().version(), 2u);
  EXPECT_EQ(e->Poll("a")->kind, Kind::kTask);  // version 3 starts the next tree
}

// A client revoked while it holds a task (Leave): its task no longer counts against the
// concurrency bound, and it no longer counts as connected.
TEST_F(AsyncEngineTest, ALeavingClientsTaskIsReleased) {
  AsyncOptions o = Options(5, 2, 1.0, "constant");
  o.max_concurrency = 1;
  Open(o);
  TaskOf("a");
  EXPECT_EQ(engine_->Poll("b")->kind, Kind::kWait);  // the one place is a's
  ASSERT_OK(engine_->Leave("a"));
  EXPECT_EQ(engine_->Poll("b")->kind, Kind::kTask);
  EXPECT_EQ(engine_->status().connected_clients, 3);  // b, c and slow; a left
}

AsyncOptions CommittedOutside(int64_t rounds) {
  AsyncOptions o = Options(rounds, 1, 0.5, "poly:a=1");
  o.commit_outside = true;
  return o;
}

TEST_F(AsyncEngineTest, CommitOutsideServesAVersionOnceItsCommitIsHandedBack) {
  Open(CommittedOutside(5));
  Task ta = TaskOf("a"), tb = TaskOf("b");
  ASSERT_OK(Report("a", ta, 2.0f));  // version 1 = 1 + 0.5 * 2, queued
  EXPECT_EQ(engine_->model().version(), 0u);
  EXPECT_EQ(engine_->commits_pending(), 1u);
  EXPECT_TRUE(store_.ListRounds()->empty());
  EXPECT_EQ(TaskOf("c").model_version, 0u);  // tasks stay on the committed version meanwhile
  // b's task started before version 1 was aggregated: tau 1 whether or not it is committed.
  ASSERT_OK(Report("b", tb, 4.0f));  // version 2 = 2 + 0.5 * 0.5 * 4, folded without waiting
  EXPECT_EQ(engine_->commits_pending(), 2u);

  std::optional<PendingCommit> first = engine_->TakeCommit();
  ASSERT_TRUE(first.has_value());
  EXPECT_FALSE(engine_->TakeCommit().has_value());  // one at a time, in order
  Status committed_first = first->Run(&store_);
  ASSERT_OK(engine_->FinishCommit(std::move(*first), committed_first));
  EXPECT_EQ(engine_->model().version(), 1u);
  EXPECT_FLOAT_EQ(W(), 2.0f);
  EXPECT_EQ(engine_->history().back().model_sha256, engine_->model().ContentSha256());
  EXPECT_EQ(TaskOf("a").model_version, 1u);
  EXPECT_EQ(TaskOf("a").model_crc32c, engine_->model().ContentCrc32c());  // computed with the hash, outside the lock

  std::optional<PendingCommit> second = engine_->TakeCommit();
  ASSERT_TRUE(second.has_value());
  Status committed_second = second->Run(&store_);
  ASSERT_OK(engine_->FinishCommit(std::move(*second), committed_second));
  EXPECT_FLOAT_EQ(W(), 3.0f);  // as FedAsyncAppliesAlphaTimesStalenessWeight, committed inline
  EXPECT_EQ(engine_->commits_pending(), 0u);
  EXPECT_EQ(store_.ListRounds()->size(), 2u);
  EXPECT_EQ(store_.Checkpoint(2)->ContentSha256(), engine_->model().ContentSha256());
}

// The server encodes downloads from a snapshot without the engine's lock: the versions folded
// and committed after it must leave it as it was.
TEST_F(AsyncEngineTest, ASnapshotOutlivesTheVersionsCommittedAfterIt) {
  Open(CommittedOutside(5));
  std::shared_ptr<const ModelState> before = engine_->model_snapshot();
  ASSERT_OK(Report("a", TaskOf("a"), 2.0f));
  std::optional<PendingCommit> commit = engine_->TakeCommit();
  ASSERT_TRUE(commit.has_value());
  Status committed = commit->Run(&store_);
  ASSERT_OK(engine_->FinishCommit(std::move(*commit), committed));
  EXPECT_EQ(before->version(), 0u);
  EXPECT_FLOAT_EQ(before->data()[0], 1.0f);
  EXPECT_EQ(engine_->model_snapshot()->version(), 1u);
  EXPECT_EQ(engine_->model_snapshot().get(), &engine_->model());
}

TEST_F(AsyncEngineTest, AFailedOutsideCommitIsStickyAndServesNothing) {
  Open(CommittedOutside(5));
  ASSERT_OK(Report("a", TaskOf("a"), 2.0f));
  Task tb = TaskOf("b");
  std::optional<PendingCommit> commit = engine_->TakeCommit();
  ASSERT_TRUE(commit.has_value());
  EXPECT_THAT(engine_->FinishCommit(std::move(*commit), UnavailableError("disk full")),
              StatusIs(StatusCode::kUnavailable, "checkpoint of version 1"));
  EXPECT_EQ(engine_->model().version(), 0u);
  EXPECT_THAT(Report("b", tb, 1.0f), StatusIs(StatusCode::kUnavailable, "disk full"));
  EXPECT_FALSE(engine_->TakeCommit().has_value());
  EXPECT_EQ(engine_->status().error.empty(), false);
}

TEST_F(AsyncEngineTest, CommitOutsideWaitsForTheLastVersionBeforeFinishing) {
  Open(CommittedOutside(1));
  Task tb = TaskOf("b");
  ASSERT_OK(Report("a", TaskOf("a"), 2.0f));
  EXPECT_FALSE(engine_->finished());
  EXPECT_EQ(engine_->Poll("c")->kind, Kind::kWait);  // no task would count
  EXPECT_THAT(Report("b", tb, 1.0f), StatusIs(StatusCode::kFailedPrecondition, "finished"));
  std::optional<PendingCommit> commit = engine_->TakeCommit();
  ASSERT_TRUE(commit.has_value());
  Status committed = commit->Run(&store_);
  ASSERT_OK(engine_->FinishCommit(std::move(*commit), committed));
  EXPECT_TRUE(engine_->finished());
  EXPECT_EQ(engine_->Poll("c")->kind, Kind::kFinished);
}

TEST_F(AsyncEngineTest, ACommitHandedBackOutOfOrderIsRefused) {
  Open(CommittedOutside(5));
  ASSERT_OK(Report("a", TaskOf("a"), 2.0f));
  PendingCommit forged{RoundRecord{}, std::make_shared<ModelState>(Initial()), {}};
  forged.record.model_version = 7;
  EXPECT_THAT(engine_->FinishCommit(std::move(forged), Status::Ok()), StatusIs(StatusCode::kInternal, "out of order"));
  EXPECT_EQ(engine_->model().version(), 0u);
  EXPECT_EQ(engine_->commits_pending(), 1u);
}

AsyncOptions SemiAsync() {
  AsyncOptions o = Options(10, 1, 1.0, "constant");
  o.semi_async = true;
  return o;
}

TEST_F(AsyncEngineTest, SemiAsyncFirstUpdatesPublishAloneThenGroupsArriveTogether) {
  Open(SemiAsync());
  Task a = TaskOf("a"), slow = TaskOf("slow");
  EXPECT_EQ(a.hyperparams.local_steps, 100);
  clock_.SetMs(100);
  ASSERT_OK(Report("a", a, 2.0f));
  EXPECT_EQ(engine_->model().version(), 1u);
  clock_.SetMs(400);
  ASSERT_OK(Report("slow", slow, 2.0f));
  EXPECT_EQ(engine_->model().version(), 2u);
  EXPECT_FLOAT_EQ(W(), 5.0f);
  // Now both are measured: the slower client gets a quarter of the steps, so both end at 500.
  a = TaskOf("a");
  slow = TaskOf("slow");
  EXPECT_EQ(a.hyperparams.local_steps, 100);
  EXPECT_EQ(slow.hyperparams.local_steps, 25);
  clock_.SetMs(500);
  ASSERT_OK(Report("a", a, 1.0f));
  EXPECT_EQ(engine_->model().version(), 2u);  // held for the group
  EXPECT_EQ(engine_->status().round_received, 1);
  clock_.SetMs(503);
  ASSERT_OK(Report("slow", slow, 3.0f));
  EXPECT_EQ(engine_->model().version(), 3u);  // the whole group in one version
  EXPECT_FLOAT_EQ(W(), 7.0f);                 // 5 + (1 + 3) / 2
  EXPECT_EQ(engine_->history().back().num_updates, 2);
  EXPECT_EQ(engine_->status().mode, "semiasync");
  // The version's record names both updates with their staleness, group and speed, in the store.
  const std::vector<MergedUpdate> merged = store_.ListRounds()->back().merged;
  ASSERT_EQ(merged.size(), 2u);
  EXPECT_EQ(merged[0].client_id, "a");
  EXPECT_EQ(merged[1].client_id, "slow");
  EXPECT_EQ(merged[0].staleness, 0u);
  EXPECT_NE(merged[0].group, 0u);
  EXPECT_EQ(merged[0].group, merged[1].group);
  ASSERT_TRUE(merged[1].ms_per_step.has_value());
  EXPECT_NEAR(*merged[1].ms_per_step, 4.0, 0.2);
  EXPECT_EQ(store_.ListRounds()->front().merged[0].group, 0u);  // a first task: no group
  const std::vector<ClientSchedule> schedule = engine_->status().schedule;
  ASSERT_EQ(schedule.size(), 2u);
  EXPECT_EQ(schedule[1].client_id, "slow");
  EXPECT_EQ(schedule[1].local_steps, 25);
}

TEST_F(AsyncEngineTest, SemiAsyncGroupPublishesAtItsLatestTimeWithoutTheStraggler) {
  Open(SemiAsync());
  const Task slow = GroupWhereOnlyAArrived();
  clock_.SetMs(549);
  ASSERT_OK(engine_->Tick());
  EXPECT_EQ(engine_->model().version(), 2u);
  clock_.SetMs(550);  // the group's latest time: 400 + 1.5 x 100
  ASSERT_OK(engine_->Tick());
  EXPECT_EQ(engine_->model().version(), 3u);
  EXPECT_FLOAT_EQ(W(), 6.0f);
  // The straggler's update is late: kept for the next group, not published on its own.
  clock_.SetMs(600);
  ASSERT_OK(Report("slow", slow, 3.0f));
  EXPECT_EQ(engine_->model().version(), 3u);
  EXPECT_EQ(engine_->status().round_received, 1);
  // The next group (a alone) takes it along.
  const Task a = TaskOf("a");
  clock_.SetMs(600 + a.hyperparams.local_steps);
  ASSERT_OK(Report("a", a, 1.0f));
  EXPECT_EQ(engine_->model().version(), 4u);
  EXPECT_EQ(engine_->history().back().num_updates, 2);
}

// A group member whose update the door refused once held its group until the latest time; the
// group now publishes at the next tick with what arrived.
TEST_F(AsyncEngineTest, SemiAsyncGroupStopsWaitingForARefusedMember) {
  Open(SemiAsync());
  const Task slow = GroupWhereOnlyAArrived();
  EXPECT_EQ(engine_->model().version(), 2u);  // held for the group
  ASSERT_OK(engine_->Refused("slow", slow.task_id));
  ASSERT_OK(engine_->Tick());
  EXPECT_EQ(engine_->model().version(), 3u) << "published before the group's latest time (550)";
  EXPECT_FLOAT_EQ(W(), 6.0f);
  EXPECT_THAT(engine_->CheckOpenTask("slow", slow.task_id), StatusIs(StatusCode::kNotFound, "unknown task"));
  EXPECT_EQ(TaskOf("slow").model_version, 3u);  // a new task on the new version
}

TEST_F(AsyncEngineTest, SemiAsyncRefusesBadUpdatesAtTheDoor) {
  Open(SemiAsync());
  Task a = TaskOf("a");
  EXPECT_THAT(Report("a", a, NAN), StatusIs(StatusCode::kInvalidArgument, "non-finite"));
  EXPECT_EQ(engine_->status().updates_refused, 1);
  EXPECT_EQ(engine_->model().version(), 0u);
}

// What the engine acknowledged is in a published version even if the server dies right after:
// a new engine on the same store folds the logged updates again.
TEST_F(AsyncEngineTest, AcknowledgedUpdatesSurviveARestartAndArePublished) {
  Open(Options(5, 3, 1.0, "constant"));
  ASSERT_OK(Report("a", TaskOf("a"), 3.0f));
  ASSERT_OK(Report("b", TaskOf("b"), 6.0f));
  EXPECT_EQ(engine_->model().version(), 0u);
  EXPECT_EQ(store_.ListLoggedUpdates()->size(), 2u);
  engine_.reset();  // the server is killed: the buffer in memory is gone
  Open(Options(5, 3, 1.0, "constant"));
  EXPECT_EQ(engine_->status().round_received, 2);
  ASSERT_OK(Report("c", TaskOf("c"), 0.0f));
  EXPECT_EQ(engine_->model().version(), 1u);
  EXPECT_FLOAT_EQ(W(), 4.0f);  // 1 + (3 + 6 + 0) / 3: nothing lost
  const RoundRecord& v1 = engine_->history().back();
  ASSERT_EQ(v1.merged.size(), 3u);
  EXPECT_EQ(v1.merged[0].client_id, "a");
  EXPECT_EQ(v1.merged[1].client_id, "b");
  EXPECT_TRUE(store_.ListLoggedUpdates()->empty());  // the commit forgot them
}

// Coded updates are logged as they came and folded from their codes; after a restart the log is
// folded again, decoded first when the next run's strategy does not fold codes.
TEST_F(AsyncEngineTest, LoggedCodedUpdatesArePublishedAfterARestartWhateverTheNextStrategy) {
  for (const char* next_strategy : {"fedavg:weighted=false", "median"}) {
    SCOPED_TRACE(next_strategy);
    MemoryStore store;  // a fresh federation for each next strategy
    auto open = [&](const AsyncOptions& o) {
      engine_ = *AsyncEngine::Open(o, Initial(), &store, &clock_, nullptr, nullptr);
      for (const char* id : {"a", "b", "c"}) ASSERT_OK(engine_->Join({id, 10, "test"}));
    };
    AsyncOptions o = Options(5, 3, 1.0, "constant");
    open(o);
    ASSERT_TRUE(engine_->folds_coded());
    for (auto [client, value] : {std::pair{"a", 3.0f}, std::pair{"b", 6.0f}}) {
      const Task t = TaskOf(client);
      Update u;
      u.client_id = client;
      u.task_id = t.task_id;
      u.base_version = t.model_version;
      u.num_examples = 10;
      u.coded = std::make_shared<testing::RawCodedDelta>(std::vector<float>{value});
      ASSERT_OK(engine_->Submit(u));
    }
    std::vector<LoggedUpdate> logged = *store.ListLoggedUpdates();
    ASSERT_EQ(logged.size(), 2u);
    EXPECT_NE(logged[0].update.coded, nullptr);
    engine_.reset();
    o.strategy = next_strategy;
    open(o);
    EXPECT_EQ(engine_->folds_coded(), std::string(next_strategy) != "median");
    ASSERT_OK(Report("c", TaskOf("c"), 0.0f));
    ASSERT_EQ(engine_->model().version(), 1u);
    // 1 + mean(3, 6, 0) = 4, or 1 + median(3, 6, 0) = 4: nothing lost either way.
    EXPECT_FLOAT_EQ(W(), 4.0f);
    engine_.reset();
  }
}

// A client whose acknowledgement a restart lost sends its update again: the restarted engine
// (which re-folded it from the log, or published it) acknowledges it again and merges it once.
// Task ids stay unique across restarts, so a new task never looks like such a retry.
TEST_F(AsyncEngineTest, AnUpdateSentAgainAfterARestartIsAcknowledgedAndMergedOnce) {
  Open(Options(2, 3, 1.0, "constant"));
  Task ta = TaskOf("a");
  ASSERT_OK(Report("a", ta, 3.0f));
  engine_.reset();  // killed before a heard its acknowledgement

  Open(Options(2, 3, 1.0, "constant"));
  EXPECT_EQ(engine_->status().round_received, 1);
  EXPECT_OK(engine_->CheckOpenTask("a", ta.task_id));  // the server takes the bytes again
  EXPECT_THAT(engine_->CheckOpenTask("b", ta.task_id), StatusIs(StatusCode::kNotFound, "unknown task"));
  ASSERT_OK(Report("a", ta, 3.0f));
  EXPECT_EQ(engine_->status().round_received, 1);
  EXPECT_EQ(engine_->status().updates_refused, 0);
  Task again = TaskOf("a");
  EXPECT_NE(again.task_id, ta.task_id);  // the same counter position in a new opening
  ASSERT_OK(Report("b", TaskOf("b"), 6.0f));
  ASSERT_OK(Report("c", TaskOf("c"), 0.0f));
  ASSERT_EQ(engine_->model().version(), 1u);
  EXPECT_FLOAT_EQ(W(), 4.0f);  // 1 + (3 + 6 + 0) / 3: a's update counted once
  engine_.reset();             // and again after it was published

  Open(Options(2, 3, 1.0, "constant"));
  ASSERT_OK(Report("a", ta, 3.0f));
  EXPECT_EQ(engine_->status().round_received, 0);
  EXPECT_EQ(engine_->model().version(), 1u);
  EXPECT_THAT(Report("a", again, 3.0f), StatusIs(StatusCode::kNotFound, "unknown task"));  // never acknowledged
}

// With commits left to the caller, a version aggregated but not yet committed when the server
// dies is rebuilt from the log at the restart.
TEST_F(AsyncEngineTest, AVersionAggregatedButNotCommittedIsRebuiltFromTheLog) {
  AsyncOptions o = Options(5, 2, 1.0, "constant");
  o.commit_outside = true;
  Open(o);
  ASSERT_OK(Report("a", TaskOf("a"), 2.0f));
  ASSERT_OK(Report("b", TaskOf("b"), 4.0f));
  ASSERT_TRUE(engine_->TakeCommit().has_value());  // taken by the committer, which never finishes
  engine_.reset();
  EXPECT_TRUE(store_.ListRounds()->empty());
  Open(o);
  std::optional<PendingCommit> rebuilt = engine_->TakeCommit();
  ASSERT_TRUE(rebuilt.has_value());
  Status committed = rebuilt->Run(&store_);
  ASSERT_OK(engine_->FinishCommit(std::move(*rebuilt), std::move(committed)));
  EXPECT_EQ(engine_->model().version(), 1u);
  EXPECT_FLOAT_EQ(W(), 4.0f);  // 1 + (2 + 4) / 2
  EXPECT_TRUE(store_.ListLoggedUpdates()->empty());
}

TEST_F(AsyncEngineTest, SemiAsyncPublishesWhatItHadHeldAfterARestart) {
  Open(SemiAsync());
  Task a = TaskOf("a");
  Task b = TaskOf("b");
  ASSERT_OK(Report("a", a, 2.0f));  // first updates, speeds unknown: each published alone
  ASSERT_OK(Report("b", b, 2.0f));
  const uint64_t published = engine_->model().version();
  // Put one in a group and hold it, then "crash".
  a = TaskOf("a");
  b = TaskOf("b");
  clock_.SetMs(clock_.NowMs() + a.hyperparams.local_steps);
  ASSERT_OK(Report("a", a, 1.0f));
  ASSERT_EQ(engine_->model().version(), published);  // held until b arrives or the group's time passes
  EXPECT_EQ(engine_->status().round_received, 1);
  engine_.reset();
  Open(SemiAsync());
  EXPECT_EQ(engine_->model().version(), published + 1);  // the held update, published on its own
  EXPECT_EQ(engine_->history().back().merged.size(), 1u);
  EXPECT_TRUE(store_.ListLoggedUpdates()->empty());
}

// Updates held for a group are acknowledged: when another arrival publishes the federation's last
// version, they go into it rather than being left behind unmerged.
TEST_F(AsyncEngineTest, SemiAsyncMergesEveryHeldUpdateIntoTheLastVersion) {
  AsyncOptions o = SemiAsync();
  o.rounds = 3;
  Open(o);
  Task a = TaskOf("a");
  Task b = TaskOf("b");
  ASSERT_OK(Report("a", a, 1.0f));  // speeds unknown: published alone (versions 1 and 2)
  ASSERT_OK(Report("b", b, 1.0f));
  ASSERT_EQ(engine_->model().version(), 2u);
  a = TaskOf("a");
  b = TaskOf("b");
  clock_.SetMs(clock_.NowMs() + a.hyperparams.local_steps);
  ASSERT_OK(Report("a", a, 1.0f));  // held for its group, which b has not reached
  ASSERT_EQ(engine_->status().round_received, 1);
  Task c = TaskOf("c");  // c's first update is published alone, as the last version
  ASSERT_OK(Report("c", c, 1.0f));
  ASSERT_EQ(engine_->model().version(), 3u);
  EXPECT_TRUE(engine_->finished());
  EXPECT_EQ(engine_->history().back().merged.size(), 2u);  // c's and the held one of a
  EXPECT_EQ(engine_->status().round_received, 0);
}

TEST_F(AsyncEngineTest, ALoggedUpdateTheBufferRefusesDoesNotKeepTheEngineFromOpening) {
  Update wrong;
  wrong.client_id = "a";
  wrong.task_id = "t";
  wrong.num_examples = 10;
  wrong.delta = *ModelState::Create({{"other", {5}}});  // not the model's layout
  ASSERT_OK(store_.LogUpdate(1, wrong));
  Open(Options(5, 2, 1.0, "constant"));
  EXPECT_EQ(engine_->status().round_received, 0);
  ASSERT_OK(Report("a", TaskOf("a"), 2.0f));
  ASSERT_OK(Report("b", TaskOf("b"), 4.0f));
  EXPECT_EQ(engine_->model().version(), 1u);
  EXPECT_TRUE(store_.ListLoggedUpdates()->empty());  // forgotten with that commit
}

TEST(AsyncOptionsTest, ValidateNamesTheBadField) {
  AsyncOptions o;
  o.buffer_size = 0;
  EXPECT_THAT(o.Validate(), StatusIs(StatusCode::kInvalidArgument, "buffer-size"));
  o = AsyncOptions();
  o.staleness = "exp";
  EXPECT_THAT(o.Validate(), StatusIs(StatusCode::kInvalidArgument, "unknown staleness rule"));
  o = AsyncOptions();
  o.semi_async = true;
  o.compass.q_max = 1;
  EXPECT_THAT(o.Validate(), StatusIs(StatusCode::kInvalidArgument, "q-max"));
  o = AsyncOptions();
  o.semi_async = true;
  o.commit_outside = true;
  EXPECT_THAT(o.Validate(), StatusIs(StatusCode::kInvalidArgument, "commit_outside"));
}

TEST(OverselectionTest, AggregatesExactlyTheFirstK) {
  ManualClock clock;
  MemoryStore store;
  SyncOptions o;
  o.rounds = 1;
  o.clients_per_round = 2;
  o.min_clients = 2;
  o.overselect = 1.5;  // 3 selected, the first 2 reports close the round
  auto e = *SyncEngine::Open(o, Initial(), &store, &clock, nullptr, nullptr);
  std::vector<Task> tasks;
  for (const char* id : {"a", "b", "c"}) ASSERT_OK(e->Join({id, 1, ""}));
  for (const char* id : {"a", "b", "c"}) tasks.push_back(e->Poll(id)->task);
  auto report = [&](const char* id, const Task& t, float d) {
    Update u;
    u.client_id = id;
    u.task_id = t.task_id;
    u.base_version = 0;
    u.num_examples = 1;
    u.delta = ModelState::ZerosLike(Initial());
    u.delta.data()[0] = d;
    return e->Submit(u);
  };
  ASSERT_OK(report("c", tasks[2], 2.0f));
  ASSERT_OK(report("a", tasks[0], 4.0f));
  EXPECT_EQ(e->model().version(), 1u);
  EXPECT_FLOAT_EQ(e->model().data()[0], 4.0f);  // 1 + (2 + 4) / 2: b's update is not in
  EXPECT_EQ(e->history().back().num_updates, 2);
  EXPECT_FALSE(report("b", tasks[1], 100.0f).ok());
}

// An edge forwarding its clients' updates raw under a FedBuff root: each forwarded update is one
// of the buffer's, folded as if its client had sent it (with the staleness of the edge's task),
// so a robust merge runs over every client update; the version's record names each under its edge.
// (The door's bundle codec has refused malformed or non-finite forwarded updates already.)
TEST_F(AsyncEngineTest, FedBuffTakesEachForwardedUpdateOfABundleAsOneOfItsBuffer) {
  AsyncOptions o = Options(2, 3, 1.0, "constant");
  o.strategy = "median";
  Open(o);
  auto bundle = [&](const std::string& edge, const Task& t, const std::vector<float>& values) {
    std::vector<Update> in;
    for (size_t i = 0; i < values.size(); ++i) in.push_back(UpdateOf("c" + std::to_string(i), t, values[i]));
    Update u = UpdateOf(edge, t, 0);
    u.delta = ModelState();
    u.num_examples = 10 * static_cast<int64_t>(values.size());
    u.coded = *(*MakeCodec(kUpdateBundleCodec))->Read(EncodeUpdateBundle(in, 1), Initial());
    return u;
  };
  const Task ta = TaskOf("a"), tb = TaskOf("b");
  ASSERT_OK(engine_->Submit(bundle("a", ta, {1.0f, 2.0f})));
  EXPECT_EQ(engine_->model().version(), 0u) << "two updates of a buffer of three";
  EXPECT_EQ(engine_->status().round_received, 2);
  ASSERT_OK(engine_->Submit(bundle("b", tb, {1000.0f})));
  ASSERT_EQ(engine_->model().version(), 1u);
  EXPECT_FLOAT_EQ(W(), 1.0f + 2.0f) << "1 + the median of 1, 2 and 1000";
  const RoundRecord r = store_.ListRounds()->back();
  EXPECT_EQ(r.num_updates, 3);
  ASSERT_EQ(r.merged.size(), 3u);
  EXPECT_EQ(r.merged[0].client_id, "a/c0");
  EXPECT_EQ(r.merged[2].client_id, "b/c0");
}

}  // namespace
}  // namespace plexus
