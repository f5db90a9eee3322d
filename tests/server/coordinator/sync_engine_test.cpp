#include "server/coordinator/sync_engine.h"

#include <bit>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "aggregators/partial_sum_delta.h"
#include "aggregators/registry.h"
#include "compression/codec.h"
#include "server/store/memory_store.h"
#include "server/store/store_wrapper.h"
#include "tests/testing/raw_coded_delta.h"
#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;
using Kind = PollAnswer::Kind;

ModelState Initial() {
  ModelState m = *ModelState::Create({{"w", {2}}});
  m.data()[0] = 1.0f;
  return m;
}

// Scores a model by its first coordinate, so tests can see what was published.
class FirstCoordinateEvaluator : public ModelEvaluator {
 public:
  Result<Evaluation> Evaluate(const ModelState& m) override {
    ++calls;
    return Evaluation{m.data()[0], 0.0, 1};
  }
  int calls = 0;
};

// A store whose commits fail on demand (fault injection).
class FailingCommitStore : public StoreWrapper {
 public:
  FailingCommitStore() : StoreWrapper(&memory_) {}
  Status CommitRound(const RoundRecord& r, const ModelState& m, std::string_view state) override {
    if (fail) return UnavailableError("disk full");
    return StoreWrapper::CommitRound(r, m, state);
  }
  bool fail = false;

 private:
  MemoryStore memory_;
};

// A store that counts PrepareCheckpoint calls and fails them on demand.
class PreparingStore : public StoreWrapper {
 public:
  PreparingStore() : StoreWrapper(&memory_) {}
  Status PrepareCheckpoint(const ModelState& m) override {
    ++prepared;
    if (fail_prepare) return UnavailableError("disk full");
    return StoreWrapper::PrepareCheckpoint(m);
  }
  int prepared = 0;
  bool fail_prepare = false;

 private:
  MemoryStore memory_;
};

TEST(CommitWithDigestsTest, FillsBothDigestsAndWritesLargeCheckpointsWhileHashing) {
  PreparingStore store;
  ModelState large = *ModelState::Create({{"w", {300000}}}, 1);  // 1.2 MB: prepared on another thread
  for (size_t i = 0; i < large.num_params(); ++i) large.data()[i] = static_cast<float>(i % 1000) * 0.5f;
  ASSERT_GE(large.num_bytes(), kPrepareWhileHashingBytes);
  RoundRecord r;
  r.round = 1;
  r.model_version = 1;
  uint32_t crc32c = 0;
  ASSERT_OK(CommitWithDigests(&store, &r, large, "", &crc32c));
  EXPECT_EQ(r.model_sha256, large.ContentSha256());
  EXPECT_EQ(crc32c, large.ContentCrc32c());
  EXPECT_EQ(store.prepared, 1);
  EXPECT_EQ(*store.Checkpoint(1), large);
  EXPECT_EQ(store.ListRounds()->back().model_sha256, large.ContentSha256());

  ModelState small = Initial();  // below the bound: hashed, then committed, on this thread
  small.set_version(2);
  r.round = 2;
  r.model_version = 2;
  ASSERT_OK(CommitWithDigests(&store, &r, small, "", &crc32c));
  EXPECT_EQ(r.model_sha256, small.ContentSha256());
  EXPECT_EQ(crc32c, small.ContentCrc32c());
  EXPECT_EQ(store.prepared, 1);

  large.set_version(3);  // as an asynchronous commit: hashed, then written, on this thread
  r.round = 3;
  r.model_version = 3;
  ASSERT_OK(CommitWithDigests(&store, &r, large, "", &crc32c, /*write_while_hashing=*/false));
  EXPECT_EQ(r.model_sha256, large.ContentSha256());
  EXPECT_EQ(store.prepared, 1);
  EXPECT_EQ(*store.Checkpoint(3), large);

  // A checkpoint that cannot be written commits nothing.
  store.fail_prepare = true;
  large.set_version(4);
  r.round = 4;
  r.model_version = 4;
  EXPECT_THAT(CommitWithDigests(&store, &r, large, "", &crc32c),
              StatusIs(StatusCode::kUnavailable, "write the checkpoint of version 4"));
  EXPECT_EQ(store.ListRounds()->size(), 3u);
  EXPECT_THAT(store.Checkpoint(4), StatusIs(StatusCode::kNotFound, "version 4"));
}

class SyncEngineTest : public ::testing::Test {
 protected:
  void Open(SyncOptions options) {
    auto e = SyncEngine::Open(options, Initial(), &store_, &clock_, &evaluator_, nullptr);
    ASSERT_OK(e);
    engine_ = std::move(e).value();
  }

  std::string Join(const std::string& id) { return *engine_->Join({id, 100, "test"}); }
  // Polls each client once: those given a task go to `sampled`, the rest to `free`.
  void PollEach(const std::vector<std::string>& ids, std::vector<std::string>* sampled,
                std::vector<std::string>* free) {
    for (const std::string& c : ids) {
      Result<PollAnswer> a = engine_->Poll(c);
      ASSERT_OK(a);
      (a->kind == Kind::kTask ? sampled : free)->push_back(c);
    }
  }

  Update UpdateFor(const std::string& client, const Task& task, float d0, int64_t examples = 100) {
    Update u;
    u.client_id = client;
    u.task_id = task.task_id;
    u.base_version = task.model_version;
    u.num_examples = examples;
    u.metrics["train_loss"] = 0.5;
    u.delta = ModelState::ZerosLike(engine_->model());
    u.delta.data()[0] = d0;
    return u;
  }

  Task TaskOf(const std::string& client) {
    Result<PollAnswer> a = engine_->Poll(client);
    EXPECT_OK(a);
    EXPECT_EQ(a->kind, Kind::kTask) << client;
    return a->task;
  }

  ManualClock clock_;
  FailingCommitStore store_;
  FirstCoordinateEvaluator evaluator_;
  std::unique_ptr<SyncEngine> engine_;
};

SyncOptions Options(int64_t rounds, int64_t k, int64_t m) {
  SyncOptions o;
  o.rounds = rounds;
  o.clients_per_round = k;
  o.min_clients = m;
  o.round_deadline_ms = 10000;
  o.selection_wait_ms = 1000;
  return o;
}

// Refused updates once held a round until its deadline, which then re-offered the task to the
// same clients, refused again: the federation stalled. The round no longer waits for a refused
// task; with nobody free to take its place, it closes with what it has once that makes a quorum,
// without waiting for the deadline, and its record says so.
TEST_F(SyncEngineTest, AFederationWhereHalfTheSampledClientsAreRefusedPublishesEveryVersion) {
  Open(Options(3, 4, 2));
  for (const char* c : {"a", "b", "c", "d"}) Join(c);
  for (uint64_t round = 1; round <= 3; ++round) {
    std::map<std::string, Task> tasks;
    for (const char* c : {"a", "b", "c", "d"}) tasks[c] = TaskOf(c);
    ASSERT_OK(engine_->Refused("c", tasks["c"].task_id));
    ASSERT_OK(engine_->Submit(UpdateFor("a", tasks["a"], 1.0f)));
    ASSERT_OK(engine_->Refused("d", tasks["d"].task_id));
    EXPECT_EQ(engine_->model().version(), round - 1);
    ASSERT_OK(engine_->Submit(UpdateFor("b", tasks["b"], 1.0f)));
    EXPECT_EQ(engine_->model().version(), round) << "closed by its last update, not its deadline";
  }
  EXPECT_TRUE(engine_->finished());
  EXPECT_EQ(clock_.NowMs(), 0);
  const std::vector<RoundRecord> rounds = *store_.ListRounds();
  ASSERT_EQ(rounds.size(), 3u);
  for (const RoundRecord& r : rounds) {
    EXPECT_EQ(r.num_selected, 4);
    EXPECT_EQ(r.num_updates, 2);
    EXPECT_EQ(r.num_refused, 2);
    EXPECT_EQ(r.num_dropped, 0);
    EXPECT_EQ(r.attempts, 1);
  }
}

// A client revoked while it holds a task (Leave): the round does not wait for it until the
// deadline, a free client gets the task in its place, and it no longer counts as connected.
TEST_F(SyncEngineTest, ALeavingClientsTaskGoesToAFreeClientAndItIsNoLongerConnected) {
  Open(Options(1, 2, 2));
  for (const char* c : {"a", "b", "c", "d"}) Join(c);
  std::vector<std::string> sampled, free;
  ASSERT_NO_FATAL_FAILURE(PollEach({"a", "b", "c", "d"}, &sampled, &free));
  ASSERT_EQ(sampled.size(), 2u);
  EXPECT_EQ(engine_->status().connected_clients, 4);
  ASSERT_OK(engine_->Leave(sampled[0]));
  ASSERT_OK(engine_->Leave(sampled[0]));  // twice: changes nothing more
  EXPECT_EQ(engine_->status().connected_clients, 3);
  int replacements = 0;
  for (const std::string& c : free) replacements += engine_->Poll(c)->kind == Kind::kTask;
  EXPECT_EQ(replacements, 1);
  ASSERT_OK(engine_->Leave("never-joined"));
}

TEST_F(SyncEngineTest, ARefusedTaskGoesToAFreeClientInItsPlace) {
  Open(Options(1, 2, 2));
  for (const char* c : {"a", "b", "c", "d"}) Join(c);
  std::vector<std::string> sampled, free;
  ASSERT_NO_FATAL_FAILURE(PollEach({"a", "b", "c", "d"}, &sampled, &free));
  ASSERT_EQ(sampled.size(), 2u);
  const Task refused = TaskOf(sampled[0]);
  ASSERT_OK(engine_->Refused(sampled[0], refused.task_id));
  ASSERT_OK(engine_->Refused(sampled[0], refused.task_id));  // twice: changes nothing more
  int replacements = 0;
  std::string replacement;
  for (const std::string& c : free) {
    if (engine_->Poll(c)->kind == Kind::kTask) {
      ++replacements;
      replacement = c;
    }
  }
  ASSERT_EQ(replacements, 1);
  // The replacement's task is in the store's open round: a restarted server would know it.
  const std::optional<OpenRoundRecord> open = *store_.GetOpenRound();
  ASSERT_TRUE(open.has_value());
  EXPECT_EQ(open->tasks.size(), 3u);
  ASSERT_OK(engine_->Submit(UpdateFor(sampled[1], TaskOf(sampled[1]), 1.0f)));
  ASSERT_OK(engine_->Submit(UpdateFor(replacement, TaskOf(replacement), 3.0f)));
  EXPECT_EQ(engine_->model().version(), 1u);
  EXPECT_FLOAT_EQ(engine_->model().data()[0], 3.0f);
  const RoundRecord r = store_.ListRounds()->at(0);
  EXPECT_EQ(r.num_refused, 1);
  EXPECT_EQ(r.num_selected, 3);
  EXPECT_EQ(r.num_dropped, 0);
}

TEST_F(SyncEngineTest, FullRoundAggregatesCheckpointsAndEvaluates) {
  Open(Options(2, 2, 2));
  Join("a");
  Join("b");
  Task ta = TaskOf("a");
  Task tb = TaskOf("b");
  EXPECT_EQ(ta.round, 1u);
  EXPECT_EQ(ta.model_version, 0u);
  EXPECT_EQ(ta.model_sha256, Initial().ContentSha256());
  EXPECT_EQ(ta.model_crc32c, Initial().ContentCrc32c());  // what the client checks its download against
  ASSERT_OK(engine_->Submit(UpdateFor("a", ta, 1.0f, 100)));
  EXPECT_EQ(engine_->model().version(), 0u);
  ASSERT_OK(engine_->Submit(UpdateFor("b", tb, 4.0f, 300)));
  // 1 + (100*1 + 300*4) / 400 = 4.25
  EXPECT_EQ(engine_->model().version(), 1u);
  EXPECT_EQ(TaskOf("a").model_crc32c, engine_->model().ContentCrc32c());  // the new version's
  EXPECT_FLOAT_EQ(engine_->model().data()[0], 4.25f);
  EXPECT_EQ(evaluator_.calls, 1);
  auto rounds = *store_.ListRounds();
  ASSERT_EQ(rounds.size(), 1u);
  EXPECT_EQ(rounds[0].num_updates, 2);
  EXPECT_DOUBLE_EQ(*rounds[0].test_accuracy, 4.25);
  EXPECT_EQ((*store_.LatestCheckpoint())->version(), 1u);
  EXPECT_EQ(engine_->status().last_accuracy, 4.25);
}

// Admit gives each update to the strategy (FoldShared), which holds up to three to fold four per
// pass: the published version has the bits of folding them one at a time, a bad update among
// them is still refused when it arrives, and the ones held before it stay in the round.
TEST_F(SyncEngineTest, UpdatesGivenToTheStrategyPublishTheBitsOfFoldingThemOneAtATime) {
  const size_t n = 7;
  Open(Options(1, n, n));
  std::vector<std::string> ids;
  for (size_t i = 0; i < n; ++i) ids.push_back(Join("c" + std::to_string(i)));
  std::vector<Task> tasks;
  for (const std::string& id : ids) tasks.push_back(TaskOf(id));
  std::unique_ptr<Aggregator> reference = *MakeAggregator("fedavg", nullptr);
  ASSERT_OK(reference->Begin(Initial()));
  for (size_t i = 0; i < n; ++i) {
    Update u = UpdateFor(ids[i], tasks[i], 0.1f * static_cast<float>(i + 1), 10 + 7 * static_cast<int64_t>(i));
    u.delta.data()[1] = 1.0f / static_cast<float>(i + 3);
    if (i == 4) {  // a NaN among held updates: refused now, as Fold refused it
      Update bad = u;
      bad.delta.data()[1] = std::nanf("");
      EXPECT_EQ(engine_->Submit(std::move(bad)).code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(engine_->model().version(), 0u);
    }
    ASSERT_OK(reference->Fold(u));
    ASSERT_OK(engine_->Submit(std::move(u)));
  }
  ASSERT_EQ(engine_->model().version(), 1u);
  const ModelState want = *reference->Finalize();
  ASSERT_EQ(want.num_params(), engine_->model().num_params());
  for (size_t j = 0; j < want.num_params(); ++j) {
    EXPECT_EQ(std::bit_cast<uint32_t>(engine_->model().data()[j]), std::bit_cast<uint32_t>(want.data()[j])) << j;
  }
  EXPECT_EQ((*store_.ListRounds())[0].num_updates, static_cast<int64_t>(n));
}

// The server encodes downloads from a snapshot without the engine's lock: publishing a new
// version must leave a snapshot taken before it as it was.
TEST_F(SyncEngineTest, ASnapshotOutlivesTheVersionsPublishedAfterIt) {
  Open(Options(2, 1, 1));
  Join("a");
  std::shared_ptr<const ModelState> before = engine_->model_snapshot();
  ASSERT_EQ(before.get(), &engine_->model());
  Task t = TaskOf("a");
  ASSERT_OK(engine_->Submit(UpdateFor("a", t, 2.0f)));
  EXPECT_EQ(before->version(), 0u);
  EXPECT_FLOAT_EQ(before->data()[0], 1.0f);
  std::shared_ptr<const ModelState> after = engine_->model_snapshot();
  EXPECT_EQ(after->version(), 1u);
  EXPECT_FLOAT_EQ(after->data()[0], 3.0f);
  EXPECT_EQ(after.get(), &engine_->model());
}

// Submit in three steps (the server stores updates without its lock): an admitted update is
// folded but not acknowledged; while it is being stored the round neither closes at its
// deadline nor on a refusal, a second upload of the task is told to ask again, and Complete
// closes the round once the store has it.
TEST_F(SyncEngineTest, ARoundWaitsForTheUpdatesBeingStored) {
  Open(Options(2, 2, 1));
  Join("a");
  Join("b");
  Task ta = TaskOf("a");
  Task tb = TaskOf("b");
  Result<AdmittedUpdate> admitted = engine_->Admit(UpdateFor("a", ta, 2.0f));
  ASSERT_OK(admitted);
  EXPECT_FALSE(engine_->Acknowledged("a", ta.task_id));
  EXPECT_THAT(engine_->Admit(UpdateFor("a", ta, 2.0f)), StatusIs(StatusCode::kUnavailable, "being stored"));
  clock_.AdvanceMs(20000);  // past the deadline, with a quorum (min_clients 1) folded
  ASSERT_OK(engine_->Tick());
  ASSERT_OK(engine_->Refused("b", tb.task_id));
  EXPECT_EQ(engine_->model().version(), 0u);
  EXPECT_TRUE(store_.ListAcceptedUpdates(1, 0)->empty());
  ASSERT_OK(engine_->Persist(*admitted));
  EXPECT_EQ(store_.ListAcceptedUpdates(1, 0)->size(), 1u);
  ASSERT_OK(engine_->Complete(std::move(admitted).value(), Status::Ok()));
  EXPECT_TRUE(engine_->Acknowledged("a", ta.task_id));
  EXPECT_EQ(engine_->model().version(), 1u);  // b refused, a in: the round closed
  EXPECT_FLOAT_EQ(engine_->model().data()[0], 3.0f);
}

// A store that failed to keep an admitted update stops the engine (sticky): it was folded.
TEST_F(SyncEngineTest, AFailedStoreOfAnAdmittedUpdateIsTheStickyError) {
  Open(Options(2, 1, 1));
  Join("a");
  Task ta = TaskOf("a");
  Result<AdmittedUpdate> admitted = engine_->Admit(UpdateFor("a", ta, 2.0f));
  ASSERT_OK(admitted);
  EXPECT_THAT(engine_->Complete(std::move(admitted).value(), UnavailableError("disk full")),
              StatusIs(StatusCode::kUnavailable, "disk full"));
  EXPECT_FALSE(engine_->Acknowledged("a", ta.task_id));
  EXPECT_THAT(engine_->Tick(), StatusIs(StatusCode::kUnavailable, "disk full"));
}

TEST_F(SyncEngineTest, FinishesAfterTheLastRound) {
  Open(Options(1, 1, 1));
  Join("a");
  Task t = TaskOf("a");
  ASSERT_OK(engine_->Submit(UpdateFor("a", t, 1.0f)));
  EXPECT_TRUE(engine_->finished());
  EXPECT_EQ(engine_->Poll("a")->kind, Kind::kFinished);
  // The same update again (its answer lost) is acknowledged; any other is too late.
  EXPECT_OK(engine_->Submit(UpdateFor("a", t, 1.0f)));
  Task other = t;
  other.task_id = "r2a0-a";
  EXPECT_THAT(engine_->Submit(UpdateFor("a", other, 1.0f)), StatusIs(StatusCode::kFailedPrecondition, "finished"));
  EXPECT_EQ(engine_->model().version(), 1u);
}

// A client whose loss diverged reports NaN: refused at the door, so it never reaches a round
// record (SQLite stores NaN as NULL and the commit failed on a NOT NULL column, stopping the
// federation for good).
TEST_F(SyncEngineTest, NonFiniteOrOutOfRangeReportedNumbersAreRefusedAndTheRoundGoesOn) {
  Open(Options(1, 2, 2));
  Join("a");
  Join("b");
  Task ta = TaskOf("a");
  Task tb = TaskOf("b");
  for (double bad : {std::nan(""), double{INFINITY}, -double{INFINITY}, 1e301}) {
    Update u = UpdateFor("a", ta, 1.0f);
    u.metrics["train_loss"] = bad;
    EXPECT_THAT(engine_->Submit(std::move(u)), StatusIs(StatusCode::kInvalidArgument, "metric 'train_loss'"));
  }
  Update negative = UpdateFor("a", ta, 1.0f);
  negative.num_examples = -5;
  EXPECT_THAT(engine_->Submit(std::move(negative)), StatusIs(StatusCode::kInvalidArgument, "num_examples"));
  Update steps = UpdateFor("a", ta, 1.0f);
  steps.local_steps = int64_t{1} << 50;
  EXPECT_THAT(engine_->Submit(std::move(steps)), StatusIs(StatusCode::kInvalidArgument, "local_steps"));
  EXPECT_EQ(engine_->status().updates_refused, 6);
  EXPECT_EQ(engine_->status().round_received, 0);
  // The same client can still report properly, and the round closes.
  ASSERT_OK(engine_->Submit(UpdateFor("a", ta, 1.0f)));
  ASSERT_OK(engine_->Submit(UpdateFor("b", tb, 1.0f)));
  EXPECT_EQ(engine_->model().version(), 1u);
  const std::vector<RoundRecord> rounds = *store_.ListRounds();
  ASSERT_EQ(rounds.size(), 1u);
  EXPECT_DOUBLE_EQ(rounds[0].mean_train_loss, 0.5);
}

// Updates of 3e38 are finite, and so is a model of 3e38; the next round's base plus another 3e38
// is not: that aggregate is not published, the round is retried, and an honest retry publishes.
TEST_F(SyncEngineTest, ANonFiniteAggregateIsNotPublishedAndTheRoundIsRetried) {
  Open(Options(2, 2, 2));
  Join("a");
  Join("b");
  Task ta = TaskOf("a");
  Task tb = TaskOf("b");
  ASSERT_OK(engine_->Submit(UpdateFor("a", ta, 3e38f)));
  ASSERT_OK(engine_->Submit(UpdateFor("b", tb, 3e38f)));
  ASSERT_EQ(engine_->model().version(), 1u);  // 1 + 3e38: huge but finite
  ta = TaskOf("a");
  tb = TaskOf("b");
  ASSERT_OK(engine_->Submit(UpdateFor("a", ta, 3e38f)));
  ASSERT_OK(engine_->Submit(UpdateFor("b", tb, 3e38f)));
  EXPECT_EQ(engine_->model().version(), 1u);  // 6e38 overflows: not published
  EXPECT_EQ(engine_->status().aggregates_nonfinite, 1);
  EXPECT_EQ(store_.ListRounds()->size(), 1u);
  Task ra = TaskOf("a");
  Task rb = TaskOf("b");
  EXPECT_NE(ra.task_id, ta.task_id);  // a new attempt of round 2
  EXPECT_EQ(ra.round, 2u);
  ASSERT_OK(engine_->Submit(UpdateFor("a", ra, -3e38f)));
  ASSERT_OK(engine_->Submit(UpdateFor("b", rb, -3e38f)));
  EXPECT_EQ(engine_->model().version(), 2u);
  EXPECT_TRUE(AllFinite(engine_->model().data()));
  EXPECT_TRUE(engine_->finished());
}

// With server momentum the refused aggregate's velocity goes too: the retry starts from the
// velocity committed with version 1 (3e38), so -3e38 gives 0.9 * 3e38 - 3e38 and a finite model.
// Kept, the refused velocity (0.9 * 3e38 + 3e38) would make the retry overflow as well.
TEST_F(SyncEngineTest, ARefusedAggregateLeavesTheServerMomentumOfTheLastVersion) {
  SyncOptions o = Options(2, 1, 1);
  o.strategy = "fedavgm:momentum=0.9";
  Open(o);
  Join("a");
  ASSERT_OK(engine_->Submit(UpdateFor("a", TaskOf("a"), 3e38f)));
  ASSERT_EQ(engine_->model().version(), 1u);
  ASSERT_OK(engine_->Submit(UpdateFor("a", TaskOf("a"), 3e38f)));
  ASSERT_EQ(engine_->status().aggregates_nonfinite, 1);
  ASSERT_OK(engine_->Submit(UpdateFor("a", TaskOf("a"), -3e38f)));
  ASSERT_EQ(engine_->model().version(), 2u);
  // 1 + 3e38 is 3e38 in float; then 3e38 + (0.9 * 3e38 - 3e38).
  const double expected = 0.9 * static_cast<double>(3e38f);
  EXPECT_NEAR(engine_->model().data()[0], expected, 1e-6 * expected);
}

// Krum with f=1 needs 5 updates: a round could close with min-clients = 4 and then never
// aggregate. Refused when the engine opens, naming the fix.
TEST_F(SyncEngineTest, AStrategyThatNeedsMoreUpdatesThanMinClientsIsRefusedAtOpen) {
  SyncOptions o = Options(1, 4, 4);
  o.strategy = "krum:f=1";
  EXPECT_THAT(SyncEngine::Open(o, Initial(), &store_, &clock_, nullptr, nullptr).status(),
              StatusIs(StatusCode::kInvalidArgument, "needs at least 5 updates per round, but min-clients is 4"));
  o = Options(1, 10, 10);
  o.strategy = "bulyan:f=2";
  EXPECT_THAT(SyncEngine::Open(o, Initial(), &store_, &clock_, nullptr, nullptr).status(),
              StatusIs(StatusCode::kInvalidArgument, "needs at least 11"));
  o = Options(1, 5, 5);
  o.strategy = "krum:f=1";
  EXPECT_OK(SyncEngine::Open(o, Initial(), &store_, &clock_, nullptr, nullptr));
}

// A server killed after committing a version but before evaluating it evaluates it when it
// restarts, so its summary never reports the previous version's accuracy for the new version.
TEST_F(SyncEngineTest, ARestartEvaluatesCommittedVersionsThatLackAnEvaluation) {
  SyncOptions o = Options(3, 1, 1);
  auto first = SyncEngine::Open(o, Initial(), &store_, &clock_, /*evaluator=*/nullptr, nullptr);
  ASSERT_OK(first);
  ASSERT_OK((*first)->Join({"a", 100, "test"}));
  Result<PollAnswer> task = (*first)->Poll("a");
  ASSERT_OK(task);
  Update u;
  u.client_id = "a";
  u.task_id = task->task.task_id;
  u.num_examples = 100;
  u.delta = ModelState::ZerosLike(Initial());
  u.delta.data()[0] = 2.0f;
  ASSERT_OK((*first)->Submit(std::move(u)));
  ASSERT_EQ(store_.ListRounds()->size(), 1u);
  EXPECT_FALSE(store_.ListRounds()->front().test_accuracy.has_value());  // as if killed before evaluating
  first->reset();
  Open(o);  // with the evaluator
  EXPECT_EQ(evaluator_.calls, 1);
  EXPECT_DOUBLE_EQ(*store_.ListRounds()->front().test_accuracy, 3.0);
  EXPECT_EQ(engine_->status().last_accuracy, 3.0);
}

TEST_F(SyncEngineTest, WaitsForKOrForSelectionWaitWithM) {
  Open(Options(1, 3, 2));
  Join("a");
  EXPECT_EQ(engine_->Poll("a")->kind, Kind::kWait);
  Join("b");
  EXPECT_EQ(engine_->Poll("b")->kind, Kind::kWait);  // 2 >= M but the selection wait has not passed
  clock_.AdvanceMs(1000);
  EXPECT_EQ(engine_->Poll("a")->kind, Kind::kTask);
  Join("c");
  EXPECT_EQ(engine_->Poll("c")->kind, Kind::kWait);  // not selected: the round is already open
}

TEST_F(SyncEngineTest, SamplesKOfTheAvailableClientsDeterministically) {
  auto selected = [&](uint64_t seed) {
    SyncOptions o = Options(1, 3, 3);
    o.seed = seed;
    ManualClock clock;
    MemoryStore store;
    auto e = *SyncEngine::Open(o, Initial(), &store, &clock, nullptr, nullptr);
    std::vector<std::string> ids;
    for (int i = 0; i < 8; ++i) ids.push_back(*e->Join({"c" + std::to_string(i), 1, ""}));
    std::string picked;
    for (const auto& id : ids) picked += e->Poll(id)->kind == Kind::kTask ? "1" : "0";
    return picked;
  };
  EXPECT_EQ(selected(1), selected(1));
  const std::string one = selected(1);
  EXPECT_EQ(std::count(one.begin(), one.end(), '1'), 3);
  EXPECT_TRUE(selected(1) != selected(2) || selected(1) != selected(3));
}

TEST_F(SyncEngineTest, DeadlineDropsStragglersWhenQuorumIsMet) {
  Open(Options(2, 3, 2));
  for (auto id : {"a", "b", "c"}) Join(id);
  Task ta = TaskOf("a"), tb = TaskOf("b"), tc = TaskOf("c");
  ASSERT_OK(engine_->Submit(UpdateFor("a", ta, 2.0f)));
  ASSERT_OK(engine_->Submit(UpdateFor("b", tb, 2.0f)));
  clock_.AdvanceMs(9999);
  ASSERT_OK(engine_->Tick());
  EXPECT_EQ(engine_->model().version(), 0u);
  clock_.AdvanceMs(1);
  ASSERT_OK(engine_->Tick());
  EXPECT_EQ(engine_->model().version(), 1u);
  EXPECT_FLOAT_EQ(engine_->model().data()[0], 3.0f);
  EXPECT_EQ(engine_->history().back().num_dropped, 1);
  // The straggler's late update is refused and changes nothing.
  EXPECT_THAT(engine_->Submit(UpdateFor("c", tc, 100.0f)), StatusIs(StatusCode::kNotFound, "unknown task id"));
  EXPECT_FLOAT_EQ(engine_->model().data()[0], 3.0f);
}

TEST_F(SyncEngineTest, RoundWithoutQuorumIsRetriedNotAggregated) {
  Open(Options(1, 3, 2));
  for (auto id : {"a", "b", "c"}) Join(id);
  Task ta = TaskOf("a");
  ASSERT_OK(engine_->Submit(UpdateFor("a", ta, 2.0f)));
  clock_.AdvanceMs(10000);
  ASSERT_OK(engine_->Tick());
  EXPECT_EQ(engine_->model().version(), 0u);
  EXPECT_TRUE(store_.ListRounds()->empty());
  // A new attempt with new task ids; the old task is gone.
  Task retry = TaskOf("a");
  EXPECT_NE(retry.task_id, ta.task_id);
  EXPECT_EQ(retry.round, 1u);
  for (auto id : {"a", "b", "c"}) {
    Task t = id == std::string("a") ? retry : TaskOf(id);
    ASSERT_OK(engine_->Submit(UpdateFor(id, t, 1.0f)));
  }
  EXPECT_EQ(engine_->model().version(), 1u);
  EXPECT_EQ(engine_->history().back().attempts, 2);
}

TEST_F(SyncEngineTest, BadUpdatesAreRefusedAndLoseNothing) {
  Open(Options(1, 2, 2));
  Join("a");
  Join("b");
  Task ta = TaskOf("a"), tb = TaskOf("b");
  ASSERT_OK(engine_->Submit(UpdateFor("a", ta, 2.0f)));

  Update nan = UpdateFor("b", tb, std::nanf(""));
  EXPECT_THAT(engine_->Submit(nan), StatusIs(StatusCode::kInvalidArgument, "non-finite"));
  Update shape = UpdateFor("b", tb, 1.0f);
  shape.delta = *ModelState::Create({{"w", {3}}});
  EXPECT_THAT(engine_->Submit(shape), StatusIs(StatusCode::kInvalidArgument, "shape [3], expected [2]"));
  Update unknown_task = UpdateFor("b", tb, 1.0f);
  unknown_task.task_id = "r9a0-b";
  EXPECT_THAT(engine_->Submit(unknown_task), StatusIs(StatusCode::kNotFound, "unknown task id 'r9a0-b'"));
  EXPECT_THAT(engine_->Submit(UpdateFor("b", ta, 1.0f)), StatusIs(StatusCode::kPermissionDenied, "another client"));
  Update stale = UpdateFor("b", tb, 1.0f);
  stale.base_version = 7;
  EXPECT_THAT(engine_->Submit(stale), StatusIs(StatusCode::kFailedPrecondition, "version 7"));
  EXPECT_THAT(engine_->Submit(UpdateFor("zed", tb, 1.0f)), StatusIs(StatusCode::kNotFound, "unknown client"));
  EXPECT_THAT(engine_->Poll("zed"), StatusIs(StatusCode::kNotFound, "join first"));
  EXPECT_EQ(engine_->status().updates_refused, 6);

  ASSERT_OK(engine_->Submit(UpdateFor("a", ta, 50.0f)));  // duplicate of an accepted task: ignored
  ASSERT_OK(engine_->Submit(UpdateFor("b", tb, 4.0f)));
  EXPECT_FLOAT_EQ(engine_->model().data()[0], 4.0f);  // 1 + (2 + 4) / 2
}

TEST_F(SyncEngineTest, ResumesFromTheLatestCheckpoint) {
  Open(Options(3, 1, 1));
  Join("a");
  Task t = TaskOf("a");
  ASSERT_OK(engine_->Submit(UpdateFor("a", t, 1.0f)));
  engine_.reset();  // "crash"

  Open(Options(3, 1, 1));
  EXPECT_EQ(engine_->model().version(), 1u);
  EXPECT_FLOAT_EQ(engine_->model().data()[0], 2.0f);
  EXPECT_EQ(engine_->history().size(), 1u);
  Task next = TaskOf("a");  // a known client, no need to join again
  EXPECT_EQ(next.round, 2u);
}

TEST_F(SyncEngineTest, ServerMomentumSurvivesARestart) {
  // Three rounds of FedAvgM with one client, with and without a "crash" after round 2: the third
  // round's model is the same only if the velocity was committed with round 2 and restored.
  SyncOptions o = Options(3, 1, 1);
  o.strategy = "fedavgm:momentum=0.9";
  auto run_round = [&](float d0) {
    Task t = TaskOf("a");
    ASSERT_OK(engine_->Submit(UpdateFor("a", t, d0)));
  };
  Open(o);
  Join("a");
  run_round(1.0f);
  run_round(1.0f);
  engine_.reset();  // "crash"
  Open(o);
  run_round(1.0f);
  const float restarted = engine_->model().data()[0];

  FailingCommitStore fresh_store;
  auto fresh = SyncEngine::Open(o, Initial(), &fresh_store, &clock_, nullptr, nullptr);
  ASSERT_OK(fresh);
  engine_ = std::move(fresh).value();
  Join("a");
  for (int i = 0; i < 3; ++i) run_round(1.0f);
  EXPECT_EQ(restarted, engine_->model().data()[0]);
  EXPECT_FLOAT_EQ(restarted, 1.0f + 1.0f + 1.9f + 2.71f);  // v = 1, 1.9, 2.71 added to the initial 1

  // A database whose state belongs to another strategy is refused with a message.
  o.strategy = "fedadam";
  EXPECT_THAT(SyncEngine::Open(o, Initial(), &fresh_store, &clock_, nullptr, nullptr).status(),
              StatusIs(StatusCode::kInvalidArgument, "was --strategy changed?"));
}

TEST_F(SyncEngineTest, RefusesADatabaseOfAnotherModel) {
  ASSERT_OK(store_.PutCheckpoint(*ModelState::Create({{"other", {5}}})));
  EXPECT_THAT(SyncEngine::Open(Options(1, 1, 1), Initial(), &store_, &clock_, nullptr, nullptr),
              StatusIs(StatusCode::kFailedPrecondition, "another architecture"));
}

TEST_F(SyncEngineTest, FailedCheckpointIsSticky) {
  Open(Options(2, 1, 1));
  Join("a");
  Task t = TaskOf("a");
  store_.fail = true;
  EXPECT_THAT(engine_->Submit(UpdateFor("a", t, 1.0f)), StatusIs(StatusCode::kUnavailable, "disk full"));
  EXPECT_EQ(engine_->model().version(), 0u);
  store_.fail = false;
  EXPECT_THAT(engine_->Poll("a"), StatusIs(StatusCode::kUnavailable, "checkpoint of round 1"));
  EXPECT_FALSE(engine_->status().error.empty());
}

TEST(SyncOptionsTest, ValidateNamesTheBadField) {
  SyncOptions o;
  o.min_clients = 5;
  o.clients_per_round = 4;
  EXPECT_THAT(o.Validate(), StatusIs(StatusCode::kInvalidArgument, "min-clients (5) cannot exceed"));
  o = SyncOptions();
  o.rounds = 0;
  EXPECT_THAT(o.Validate(), StatusIs(StatusCode::kInvalidArgument, "rounds must be positive"));
  o = SyncOptions();
  o.task.momentum = 1.0;
  EXPECT_THAT(o.Validate(), StatusIs(StatusCode::kInvalidArgument, "momentum"));
  ManualClock clock;
  MemoryStore store;
  o = SyncOptions();
  o.strategy = "nope";
  EXPECT_THAT(SyncEngine::Open(o, Initial(), &store, &clock, nullptr, nullptr),
              StatusIs(StatusCode::kInvalidArgument, "unknown strategy"));
}

}  // namespace
}  // namespace plexus

namespace plexus {
namespace {

TEST_F(SyncEngineTest, AcknowledgedUpdatesSurviveACrashMidRound) {
  Open(Options(1, 2, 2));
  Join("a");
  Join("b");
  Task ta = TaskOf("a"), tb = TaskOf("b");
  ASSERT_OK(engine_->Submit(UpdateFor("a", ta, 1.0f, 100)));  // acknowledged
  engine_.reset();                                            // "kill -9" before the round closes

  Open(Options(1, 2, 2));
  EXPECT_EQ(engine_->status().round_received, 1);
  EXPECT_EQ(engine_->Poll("a")->kind, PollAnswer::Kind::kWait);  // a's update is in: no new task
  Task again = TaskOf("b");
  EXPECT_EQ(again.task_id, tb.task_id);  // b's task carries on
  ASSERT_OK(engine_->Submit(UpdateFor("b", tb, 4.0f, 300)));
  EXPECT_EQ(engine_->model().version(), 1u);
  EXPECT_FLOAT_EQ(engine_->model().data()[0], 4.25f);  // the same result as without the crash
  EXPECT_EQ(engine_->history().back().num_updates, 2);
  EXPECT_FALSE(store_.GetOpenRound()->has_value());
}

// Coded updates (values kept in their codec's form) fold from their codes, are stored so, and a
// restarted engine folds them again: with a strategy that folds codes as they are, with one that
// does not decoded first. Either way the round's result is what float32 updates give.
TEST_F(SyncEngineTest, AcknowledgedCodedUpdatesSurviveACrashMidRoundWhateverTheNextStrategy) {
  for (const char* next_strategy : {"fedavg", "trimmed_mean:beta=0"}) {
    SCOPED_TRACE(next_strategy);
    MemoryStore store;  // a fresh federation for each next strategy
    SyncOptions o = Options(1, 2, 2);
    engine_ = *SyncEngine::Open(o, Initial(), &store, &clock_, nullptr, nullptr);
    ASSERT_TRUE(engine_->folds_coded());
    Join("a");
    Join("b");
    Task ta = TaskOf("a"), tb = TaskOf("b");
    Update a = UpdateFor("a", ta, 0.0f, 100);
    a.delta = ModelState();
    a.coded = std::make_shared<testing::RawCodedDelta>(std::vector<float>{1.0f, -2.0f});
    ASSERT_OK(engine_->Submit(a));
    std::vector<Update> stored = *store.ListAcceptedUpdates(1, 0);
    ASSERT_EQ(stored.size(), 1u);
    EXPECT_EQ(stored[0].coded, a.coded);  // kept as it came, no float32 copy
    engine_.reset();                      // "kill -9" before the round closes

    o.strategy = next_strategy;
    engine_ = *SyncEngine::Open(o, Initial(), &store, &clock_, nullptr, nullptr);
    EXPECT_EQ(engine_->folds_coded(), std::string(next_strategy) == "fedavg");
    EXPECT_EQ(engine_->status().round_received, 1);
    ASSERT_OK(engine_->Submit(UpdateFor("b", tb, 4.0f, 100)));
    ASSERT_EQ(engine_->model().version(), 1u);
    EXPECT_FLOAT_EQ(engine_->model().data()[0], 1.0f + 2.5f);  // the mean of 1 and 4 (equal weights)
    EXPECT_FLOAT_EQ(engine_->model().data()[1], -1.0f);
    engine_.reset();
  }
}

// A crash between committing a round and answering its last upload leaves that client without
// its acknowledgement: it sends the update again to the restarted server, which must say it is in
// (and merge nothing twice), not refuse it as a task of a closed round.
TEST_F(SyncEngineTest, AnUpdateSentAgainAfterItsRoundClosedIsAcknowledgedAndNotMergedTwice) {
  Open(Options(3, 2, 2));
  Join("a");
  Join("b");
  Task ta = TaskOf("a"), tb = TaskOf("b");
  ASSERT_OK(engine_->Submit(UpdateFor("a", ta, 1.0f, 100)));
  ASSERT_OK(engine_->Submit(UpdateFor("b", tb, 4.0f, 300)));
  ASSERT_EQ(engine_->model().version(), 1u);
  const std::vector<MergedUpdate> merged = engine_->history().back().merged;
  ASSERT_EQ(merged.size(), 2u);  // the round's record names what it merged
  EXPECT_EQ(merged[0].task_id, ta.task_id);
  EXPECT_EQ(merged[1].task_id, tb.task_id);
  EXPECT_EQ(store_.ListRounds()->back().merged, merged);
  engine_.reset();  // "kill -9" before b heard its acknowledgement

  Open(Options(3, 2, 2));
  const int64_t accepted = engine_->status().updates_accepted;
  EXPECT_OK(engine_->CheckOpenTask("b", tb.task_id));  // the server takes the bytes again
  EXPECT_OK(engine_->Submit(UpdateFor("b", tb, 4.0f, 300)));
  EXPECT_EQ(engine_->status().updates_accepted, accepted);
  EXPECT_EQ(engine_->status().updates_refused, 0);
  EXPECT_EQ(engine_->model().version(), 1u);
  EXPECT_FLOAT_EQ(engine_->model().data()[0], 4.25f);
  // Only its own client's task: another client naming it is refused, as is a task never merged.
  EXPECT_FALSE(engine_->Submit(UpdateFor("a", tb, 4.0f, 300)).ok());
  Task never = tb;
  never.task_id = "r1a0-c";
  EXPECT_FALSE(engine_->Submit(UpdateFor("b", never, 4.0f, 300)).ok());
  // The next round goes on as usual.
  Task next = TaskOf("b");
  EXPECT_EQ(next.round, 2u);
}

}  // namespace
}  // namespace plexus

namespace plexus {
namespace {

class BackupWorkersEngineTest : public SyncEngineTest {
 protected:
  // One round with a, b, c reporting after 100 ms and d after `slow_ms`; returns the updates
  // the round closed with. d's update, if not waited for, is refused.
  int64_t RunRound(int64_t slow_ms) {
    const uint64_t version = engine_->model().version();
    std::map<std::string, Task> tasks;
    for (const char* id : {"a", "b", "c", "d"}) tasks[id] = TaskOf(id);
    clock_.AdvanceMs(100);
    // Spread the deltas so the updates disagree: noise as well as signal.
    float d = 1.0f;
    for (const char* id : {"a", "b", "c"}) {
      EXPECT_OK(engine_->Submit(UpdateFor(id, tasks[id], d)));
      d = -d + 0.5f;
    }
    if (engine_->model().version() == version) {
      clock_.AdvanceMs(slow_ms - 100);
      EXPECT_OK(engine_->Submit(UpdateFor("d", tasks["d"], 0.2f)));
    } else {
      clock_.AdvanceMs(slow_ms - 100);
      EXPECT_FALSE(engine_->Submit(UpdateFor("d", tasks["d"], 0.2f)).ok());  // not waited for
    }
    EXPECT_EQ(engine_->model().version(), version + 1);
    return engine_->history().back().num_updates;
  }
};

TEST_F(BackupWorkersEngineTest, StaticClosesWithoutTheSlowest) {
  SyncOptions o = Options(2, 4, 2);
  o.backup_workers = "static:b=1";
  Open(o);
  for (const char* id : {"a", "b", "c", "d"}) Join(id);
  EXPECT_EQ(RunRound(1000), 3);
  EXPECT_EQ(engine_->history().back().num_dropped, 1);
}

TEST_F(BackupWorkersEngineTest, DynamicLearnsToStopWaitingForAFarSlowerClient) {
  SyncOptions o = Options(3, 4, 2);
  o.backup_workers = "dynamic";
  Open(o);
  for (const char* id : {"a", "b", "c", "d"}) Join(id);
  EXPECT_EQ(RunRound(1000), 4);  // nothing known yet: wait for everyone
  EXPECT_EQ(RunRound(1000), 3);  // d takes 10x as long: not worth it
  EXPECT_EQ(RunRound(1000), 3);
}

TEST_F(BackupWorkersEngineTest, DynamicKeepsWaitingWhenTheSlowestIsNearlyAsFast) {
  SyncOptions o = Options(2, 4, 2);
  o.backup_workers = "dynamic";
  Open(o);
  for (const char* id : {"a", "b", "c", "d"}) Join(id);
  EXPECT_EQ(RunRound(110), 4);
  EXPECT_EQ(RunRound(110), 4);
}

TEST(SyncOptionsBackupTest, BadSpecIsRefused) {
  SyncOptions o;
  o.backup_workers = "some";
  EXPECT_THAT(o.Validate(), StatusIs(StatusCode::kInvalidArgument, "backup workers 'some'"));
}

}  // namespace
}  // namespace plexus

namespace plexus {
namespace {

// --- Edge mode (SyncOptions::edge, plexus server --upstream) ---

SyncOptions EdgeOptions() {
  SyncOptions o = Options(/*rounds=*/1, /*k=*/2, /*m=*/2);
  o.strategy = "fedavg_exact";
  o.edge = true;
  return o;
}

std::shared_ptr<const ModelState> ParentVersion(uint64_t version, float w0) {
  ModelState m = Initial();
  m.data()[0] = w0;
  m.set_version(version);
  return std::make_shared<const ModelState>(std::move(m));
}

// An edge opens rounds only on its parent's versions, numbered as the parent's round, and a
// closed round is not published: its exact sum waits as the partial, until the next version.
TEST_F(SyncEngineTest, AnEdgesRoundOpensOnTheParentsVersionAndClosesIntoAPartialSum) {
  Open(EdgeOptions());
  Join("a");
  Join("b");
  Result<PollAnswer> idle = engine_->Poll("a");
  ASSERT_OK(idle);
  EXPECT_EQ(idle->kind, Kind::kWait) << "no round before the parent hands out a version";

  ASSERT_OK(engine_->AdoptParentVersion(ParentVersion(4, 3.0f), 5, "t4"));
  EXPECT_EQ(engine_->model().version(), 4u);
  EXPECT_EQ(engine_->model().data()[0], 3.0f);
  const Task ta = TaskOf("a");
  const Task tb = TaskOf("b");
  EXPECT_EQ(ta.round, 5u) << "the clients' round is the parent's (their training seeds follow it)";
  EXPECT_EQ(ta.model_version, 4u);
  ASSERT_OK(engine_->Submit(UpdateFor("a", ta, 1.0f, 100)));
  EXPECT_EQ(engine_->partial(), nullptr);
  ASSERT_OK(engine_->Submit(UpdateFor("b", tb, 0.5f, 300)));

  const SyncEngine::EdgePartial* p = engine_->partial();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->round, 5u);
  EXPECT_EQ(p->base_version, 4u);
  EXPECT_EQ(p->sum.count(), 2);
  EXPECT_EQ(p->sum.weight(), 400.0);
  EXPECT_EQ(p->num_examples, 400);
  ASSERT_EQ(p->merged.size(), 2u);
  // Each client update listed with its task and the hash of its values, for the parent's records.
  Update a_update = UpdateFor("a", ta, 1.0f, 100);
  EXPECT_EQ(p->merged[0].client_id, "a");
  EXPECT_EQ(p->merged[0].task_id, ta.task_id);
  EXPECT_EQ(p->merged[0].update_sha256, a_update.delta.ContentSha256());
  EXPECT_EQ(p->merged[1].client_id, "b");
  EXPECT_EQ(p->merged[1].update_sha256.size(), 64u);
  std::vector<float> mean(2);
  ASSERT_OK(p->sum.MeanInto(mean));
  EXPECT_FLOAT_EQ(mean[0], (100 * 1.0f + 300 * 0.5f) / 400);
  EXPECT_EQ(engine_->model().version(), 4u) << "an edge publishes nothing of its own";
  EXPECT_EQ((*engine_->Poll("a")).kind, Kind::kWait) << "no second round on the same version";
  EXPECT_FALSE(engine_->finished());

  // The same version handed out again (a retried task) keeps the partial; a newer one drops it.
  ASSERT_OK(engine_->AdoptParentVersion(ParentVersion(4, 3.0f), 5, "t4"));
  EXPECT_NE(engine_->partial(), nullptr);
  ASSERT_OK(engine_->AdoptParentVersion(ParentVersion(5, 2.0f), 6, "t5"));
  EXPECT_EQ(engine_->partial(), nullptr);
  EXPECT_EQ(TaskOf("a").round, 6u);

  // An asynchronous parent hands out another task on the same version: a new round, with task
  // ids of its own, and the partial answers that task only.
  const Task a6 = TaskOf("a");
  const Task b6 = TaskOf("b");
  ASSERT_OK(engine_->Submit(UpdateFor("a", a6, 1.0f)));
  ASSERT_OK(engine_->Submit(UpdateFor("b", b6, 1.0f)));
  ASSERT_NE(engine_->partial(), nullptr);
  EXPECT_EQ(engine_->partial()->parent_task, "t5");
  ASSERT_OK(engine_->AdoptParentVersion(ParentVersion(5, 2.0f), 6, "t5-again"));
  EXPECT_EQ(engine_->partial(), nullptr);
  const Task again = TaskOf("a");
  EXPECT_NE(again.task_id, a6.task_id);
  EXPECT_EQ(again.model_version, 5u);

  engine_->FinishWithParent();
  EXPECT_TRUE(engine_->finished());
  EXPECT_EQ((*engine_->Poll("b")).kind, Kind::kFinished);
}

// A restarted edge closes the round it had acknowledged updates for again: the partial is not lost.
TEST_F(SyncEngineTest, ARestartedEdgeRebuildsThePartialOfItsAcknowledgedUpdates) {
  Open(EdgeOptions());
  Join("a");
  Join("b");
  ASSERT_OK(engine_->AdoptParentVersion(ParentVersion(1, 2.0f), 2, "t1"));
  const Task ta = TaskOf("a");
  const Task tb = TaskOf("b");
  ASSERT_OK(engine_->Submit(UpdateFor("a", ta, 1.0f)));
  ASSERT_OK(engine_->Submit(UpdateFor("b", tb, 3.0f)));
  const ExactSum before = engine_->partial()->sum;

  engine_.reset();
  Open(EdgeOptions());
  EXPECT_EQ(engine_->model().version(), 1u);
  ASSERT_OK(engine_->Tick());
  ASSERT_NE(engine_->partial(), nullptr);
  EXPECT_EQ(engine_->partial()->sum, before);
  EXPECT_EQ(engine_->partial()->round, 2u);
  ASSERT_EQ(engine_->partial()->merged.size(), 2u);
  EXPECT_EQ(engine_->partial()->merged[1].update_sha256, UpdateFor("b", tb, 3.0f).delta.ContentSha256())
      << "the restarted edge lists the updates it re-folded, hashed again";
}

TEST_F(SyncEngineTest, EdgeModeRefusesWhatCannotComposeAndVersionsItCannotHold) {
  SyncOptions robust = EdgeOptions();
  robust.strategy = "median";
  EXPECT_THAT(robust.Validate(), StatusIs(StatusCode::kInvalidArgument, "fedavg_exact"));

  Open(EdgeOptions());
  ASSERT_OK(engine_->AdoptParentVersion(ParentVersion(3, 2.0f), 4, "t3"));
  EXPECT_THAT(engine_->AdoptParentVersion(ParentVersion(2, 2.0f), 3, "t2"),
              StatusIs(StatusCode::kFailedPrecondition, ""));
  EXPECT_THAT(engine_->AdoptParentVersion(ParentVersion(3, 9.0f), 4, "t3"),
              StatusIs(StatusCode::kFailedPrecondition, "--seed"));
  ModelState wide = *ModelState::Create({{"w", {3}}});
  wide.set_version(5);
  EXPECT_FALSE(engine_->AdoptParentVersion(std::make_shared<const ModelState>(wide), 6, "t5").ok());
  EXPECT_EQ(engine_->model().version(), 3u) << "a refused version changes nothing";
}

// An edge's partial sum of `n` updates of weight 100 moving w[0] by `d`, as a root receives it.
Update PartialFrom(const std::string& edge, const Task& task, int n, float d) {
  ExactSum sum(2);
  const std::vector<float> delta{d, 0.0f};
  for (int i = 0; i < n; ++i) EXPECT_OK(sum.Add(delta, 100));
  Update u;
  u.client_id = edge;
  u.task_id = task.task_id;
  u.base_version = task.model_version;
  u.num_examples = 100 * n;
  std::vector<PartialContribution> listed;
  for (int i = 0; i < n; ++i) {
    listed.push_back({"c" + std::to_string(i), edge + "-task" + std::to_string(i), std::string(64, '0')});
  }
  u.coded = *PartialSumDelta::Make("exactsum", sum.Encode(), sum, std::move(listed));
  return u;
}

// At a root under edges the deadline's quorum counts updates, not edges (min_updates), and the
// round's record counts its clients' updates, with the edge that never reported dropped.
TEST_F(SyncEngineTest, ARootsQuorumCountsTheUpdatesInsideItsEdgesPartialSums) {
  SyncOptions o = Options(/*rounds=*/2, /*k=*/3, /*m=*/1);
  o.strategy = "fedavg_exact";
  o.min_updates = 5;
  Open(o);
  for (const char* e : {"e1", "e2", "e3"}) Join(e);
  std::map<std::string, Task> tasks;
  for (const char* e : {"e1", "e2", "e3"}) tasks[e] = TaskOf(e);
  ASSERT_OK(engine_->Submit(PartialFrom("e1", tasks["e1"], 2, 1.0f)));
  ASSERT_OK(engine_->Submit(PartialFrom("e2", tasks["e2"], 2, 1.0f)));
  clock_.AdvanceMs(10000);
  ASSERT_OK(engine_->Tick());
  EXPECT_EQ(engine_->model().version(), 0u) << "4 updates from two edges are no quorum of 5";

  for (const char* e : {"e1", "e2", "e3"}) tasks[e] = TaskOf(e);
  ASSERT_OK(engine_->Submit(PartialFrom("e1", tasks["e1"], 3, 2.0f)));
  ASSERT_OK(engine_->Submit(PartialFrom("e3", tasks["e3"], 2, 2.0f)));
  clock_.AdvanceMs(10000);
  ASSERT_OK(engine_->Tick());
  ASSERT_EQ(engine_->model().version(), 1u) << "5 updates from two edges make the quorum";
  EXPECT_FLOAT_EQ(engine_->model().data()[0], 1.0f + 2.0f);
  const RoundRecord r = store_.ListRounds()->back();
  // Its record lists the client updates inside the partials (under each edge), as the edges
  // listed them.
  ASSERT_EQ(r.merged.size(), 5u);
  EXPECT_EQ(r.merged[0].client_id, "e1/c0");
  EXPECT_EQ(r.merged[0].task_id, "e1-task0");
  EXPECT_EQ(r.merged[0].update_sha256, std::string(64, '0'));
  EXPECT_EQ(r.merged[4].client_id, "e3/c1");
  EXPECT_EQ(r.num_updates, 5);
  EXPECT_EQ(r.num_selected, 3);
  EXPECT_EQ(r.num_dropped, 1);
  EXPECT_EQ(r.num_examples, 500);
}

// An edge forwarding raw (--upstream-forward raw): its closed round carries its clients' updates
// as stored.
TEST_F(SyncEngineTest, AnEdgeForwardingRawHandsOverItsClientsUpdates) {
  SyncOptions edge = EdgeOptions();
  edge.edge_forward_raw = true;
  Open(edge);
  EXPECT_EQ(engine_->strategy_description(), "forwarding every update raw to the parent");
  Join("a");
  Join("b");
  ASSERT_OK(engine_->AdoptParentVersion(ParentVersion(1, 2.0f), 2, "t1"));
  const Task ta = TaskOf("a"), tb = TaskOf("b");
  ASSERT_OK(engine_->Submit(UpdateFor("a", ta, 1.0f, 100)));
  ASSERT_OK(engine_->Submit(UpdateFor("b", tb, 3.0f, 300)));
  ASSERT_NE(engine_->partial(), nullptr);
  ASSERT_NE(engine_->partial()->forwarded, nullptr);
  const std::vector<Update> forwarded = *engine_->partial()->forwarded;
  ASSERT_EQ(forwarded.size(), 2u);
  std::map<std::string, float> first_value;
  for (const Update& u : forwarded) first_value[u.client_id] = u.delta.data()[0];
  EXPECT_EQ(first_value, (std::map<std::string, float>{{"a", 1.0f}, {"b", 3.0f}}));
}

// Edges' bundles of forwarded updates, as the root's door reads them.
Update BundleFrom(const std::string& edge, const Task& t, const std::vector<float>& values, const ModelState& layout) {
  std::vector<Update> in;
  for (size_t i = 0; i < values.size(); ++i) {
    Update c;
    c.client_id = "c" + std::to_string(i);
    c.task_id = t.task_id + "-" + c.client_id;
    c.base_version = t.model_version;
    c.num_examples = 100;
    c.delta = ModelState::ZerosLike(layout);
    c.delta.data()[0] = values[i];
    in.push_back(std::move(c));
  }
  Update u;
  u.client_id = edge;
  u.task_id = t.task_id;
  u.base_version = t.model_version;
  u.num_examples = 100 * static_cast<int64_t>(values.size());
  u.coded = *(*MakeCodec(kUpdateBundleCodec))->Read(EncodeUpdateBundle(in, layout.num_params()), layout);
  return u;
}

// A root running a robust rule folds each forwarded update as if its client had sent it, its
// quorum and record counting them, each named under its edge.
TEST_F(SyncEngineTest, ARootsRobustRuleFoldsEachForwardedUpdate) {
  SyncOptions root = Options(/*rounds=*/2, /*k=*/2, /*m=*/2);
  root.strategy = "median";
  Open(root);
  Join("e1");
  Join("e2");
  const Task t1 = TaskOf("e1"), t2 = TaskOf("e2");
  ASSERT_OK(engine_->Submit(BundleFrom("e1", t1, {1.0f, 2.0f}, engine_->model())));
  ASSERT_OK(engine_->Submit(BundleFrom("e2", t2, {1000.0f}, engine_->model())));
  ASSERT_EQ(engine_->model().version(), 1u);
  EXPECT_FLOAT_EQ(engine_->model().data()[0], 1.0f + 2.0f) << "1 + the median of 1, 2 and 1000";
  const RoundRecord r = store_.ListRounds()->back();
  EXPECT_EQ(r.num_updates, 3);
  ASSERT_EQ(r.merged.size(), 3u);
  EXPECT_EQ(r.merged[0].client_id, "e1/c0");
  EXPECT_EQ(r.merged[2].client_id, "e2/c0");
}

// A bundle refused after some of its updates were folded (here the exact sum's range) cannot be
// taken back: the attempt is abandoned and the round retried.
TEST_F(SyncEngineTest, ABundleRefusedHalfwayAbandonsTheAttempt) {
  SyncOptions root = Options(/*rounds=*/2, /*k=*/2, /*m=*/2);
  root.strategy = "fedavg_exact";
  Open(root);
  Join("e1");
  Join("e2");
  const Task again = TaskOf("e1");
  TaskOf("e2");
  EXPECT_THAT(engine_->Submit(BundleFrom("e1", again, {1.0f, 3e38f}, engine_->model())),
              StatusIs(StatusCode::kOutOfRange, "round is retried"));
  EXPECT_NE(TaskOf("e1").task_id, again.task_id) << "a new attempt, new tasks";
  EXPECT_EQ(engine_->model().version(), 0u);
}

// Edge-robust: a robust rule over the edge's own clients, sent as one contribution weighted by
// their examples.
TEST_F(SyncEngineTest, AnEdgeRobustEdgeSendsItsClientsMedianWeightedByTheirExamples) {
  SyncOptions o = Options(1, 3, 3);
  o.strategy = "median";
  o.edge = true;
  EXPECT_THAT(o.Validate(), StatusIs(StatusCode::kInvalidArgument, "--edge-robust"));
  o.edge_robust = true;
  Open(o);
  EXPECT_NE(engine_->strategy_description().find("edge-robust"), std::string::npos);
  for (const char* c : {"a", "b", "c"}) Join(c);
  ASSERT_OK(engine_->AdoptParentVersion(ParentVersion(2, 1.0f), 3, "t2"));
  std::map<std::string, Task> tasks;
  for (const char* c : {"a", "b", "c"}) tasks[c] = TaskOf(c);
  ASSERT_OK(engine_->Submit(UpdateFor("a", tasks["a"], 1.0f, 100)));
  ASSERT_OK(engine_->Submit(UpdateFor("b", tasks["b"], 2.0f, 100)));
  ASSERT_OK(engine_->Submit(UpdateFor("c", tasks["c"], 1000.0f, 100)));  // an outlier the median ignores
  const SyncEngine::EdgePartial* p = engine_->partial();
  ASSERT_NE(p, nullptr);
  std::vector<float> mean(2);
  ASSERT_OK(p->sum.MeanInto(mean));
  EXPECT_FLOAT_EQ(mean[0], 2.0f);
  EXPECT_EQ(p->sum.weight(), 300.0);
  EXPECT_EQ(p->sum.count(), 1) << "one contribution: the edge's aggregate";

  SyncOptions exact = EdgeOptions();
  exact.edge_robust = true;
  EXPECT_THAT(exact.Validate(), StatusIs(StatusCode::kInvalidArgument, "robust rules"));
  SyncOptions flat = Options(1, 3, 3);
  flat.edge_robust = true;
  EXPECT_THAT(flat.Validate(), StatusIs(StatusCode::kInvalidArgument, "--upstream"));
}

// A server optimizer steps after the sum: the root's to run. Clipping to a norm bound happens per
// update, so an edge may do it.
TEST_F(SyncEngineTest, AnEdgeRefusesAServerOptimizerButClipsToANormBound) {
  SyncOptions o = EdgeOptions();
  o.strategy = "fedadam:exact=true";
  EXPECT_THAT(o.Validate(), StatusIs(StatusCode::kInvalidArgument, "belongs at the root"));
  o.strategy = "fedavgm:exact=true";
  EXPECT_THAT(o.Validate(), StatusIs(StatusCode::kInvalidArgument, "belongs at the root"));
  o.strategy = "norm_bound:max=1,exact=true";
  EXPECT_OK(o.Validate());
  o.strategy = "fedavg:exact=true";
  EXPECT_OK(o.Validate());
  o.edge = false;
  o.strategy = "fedadam:exact=true";
  EXPECT_OK(o.Validate()) << "a root runs it";
}

TEST_F(SyncEngineTest, OnlyAnEdgeAdoptsItsParentsVersions) {
  Open(Options(1, 1, 1));
  EXPECT_THAT(engine_->AdoptParentVersion(ParentVersion(1, 2.0f), 2, "t1"),
              StatusIs(StatusCode::kFailedPrecondition, ""));
}

}  // namespace
}  // namespace plexus
