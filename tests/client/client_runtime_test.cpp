// The client runtime against an in-process transport backed by a real SyncEngine, with
// injected faults (dropped download streams, unavailable server) and a trainer without LibTorch.
#include "client/client_runtime.h"

#include <atomic>
#include <deque>
#include <filesystem>

#include "compression/codec.h"
#include "compression/coded_downloads.h"
#include "core/clock.h"
#include "core/safetensors.h"
#include "server/coordinator/sync_engine.h"
#include "server/store/memory_store.h"
#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

// Moves every weight by +1 and reports the data size: easy to check after aggregation.
class AddOneTrainer : public Trainer {
 public:
  Result<TrainOutcome> Train(const ModelState& start, const DatasetView& data, const TrainOptions&) override {
    TrainOutcome out;
    out.weights = start;
    for (float& x : out.weights.data()) x += 1.0f;
    out.num_examples = static_cast<int64_t>(data.size());
    out.steps = 1;
    return out;
  }
  // Scores every model 0.5 with loss 1 on whatever it is given.
  Result<Evaluation> Evaluate(const ModelState&, const DatasetView& data) override {
    Evaluation e;
    e.accuracy = 0.5;
    e.loss = 1.0;
    e.examples = static_cast<int64_t>(data.size());
    return e;
  }
};

// A FederationTransport that calls the engine directly, with scripted failures.
class InProcessTransport : public FederationTransport {
 public:
  InProcessTransport(SyncEngine* engine, Store* store) : engine_(engine), store_(store) {}

  Result<JoinReply> Join(const std::string& id, int64_t n, const std::string& device) override {
    if (Fail()) return UnavailableError("injected: server down");
    PLEXUS_ASSIGN_OR_RETURN(std::string got, engine_->Join({id, n, device}));
    return JoinReply{got, "tiny"};
  }
  Result<PollAnswer> Poll(const std::string& id, int64_t) override {
    if (Fail()) return UnavailableError("injected: server down");
    ++polls_;
    if (!evaluation_tasks.empty()) {  // as the server's door hands them out, before training work
      PollAnswer a;
      a.kind = PollAnswer::Kind::kTask;
      a.task = evaluation_tasks.front();
      evaluation_tasks.pop_front();
      return a;
    }
    PLEXUS_ASSIGN_OR_RETURN(PollAnswer a, engine_->Poll(id));
    a.task.upload_codec = upload_codec_;  // as the server's door names it
    a.task.download_codec = download_codec_;
    return a;
  }
  Status Download(uint64_t version, DownloadSink* sink) override {
    PLEXUS_ASSIGN_OR_RETURN(ModelState m, store_->Checkpoint(version));
    const std::string bytes = EncodeSafetensors(m);
    const size_t start = sink->received();
    size_t end = bytes.size();
    if (drop_download_after_ > 0) {  // deliver part of the rest, then "lose the connection"
      end = std::min(bytes.size(), start + drop_download_after_);
      drop_download_after_ = 0;
    }
    resumed_from_.push_back(start);
    PLEXUS_RETURN_IF_ERROR(sink->Append(std::string_view(bytes).substr(start, end - start), bytes.size()));
    return end == bytes.size() ? Status::Ok() : UnavailableError("injected: stream dropped");
  }
  // As the server's door does (CodedDownloads), all at once; `corrupt_coded_` sends a hash that
  // is not the rebuilt model's.
  Status DownloadCoded(uint64_t version, const std::string& codec, const std::string& base_sha256, std::string* buffer,
                       uint64_t* total, CodedDownload* info) override {
    if (!coded_) return FederationTransport::DownloadCoded(version, codec, base_sha256, buffer, total, info);
    coded_bases_.push_back(base_sha256);
    PLEXUS_ASSIGN_OR_RETURN(ModelState m, store_->Checkpoint(version));
    PLEXUS_ASSIGN_OR_RETURN(CodedDownloads::Download d, coded_->For(m, base_sha256));
    *buffer = *d.bytes;
    *total = buffer->size();
    *info = {codec, d.base_sha256, corrupt_coded_ ? std::string(64, '0') : d.model_sha256, {}};
    if (d.base_sha256.empty()) {
      for (const TensorSlot& t : d.rebuilt->tensors()) info->layout.push_back({t.name, t.shape});
    }
    return Status::Ok();
  }
  Result<UploadAck> Upload(const UploadHeader& h, std::shared_ptr<const Payload> sent) override {
    const std::string payload = sent->ToString();
    uploads_resuming_.push_back(h.resume);
    codecs_used_.push_back(h.codec);
    uploaded_tasks.push_back(h.task_id);
    if (Fail()) return UnavailableError("injected: server down");
    if (refuse_uploads > 0) {  // as the door refuses an update (norm bound, ...) before the engine sees it
      --refuse_uploads;
      return InvalidArgumentError("injected: update above the norm bound");
    }
    Result<ModelState> decoded =
        h.codec.empty() ? DecodeSafetensors(payload) : (*MakeCodec(h.codec))->Decode(payload, engine_->model());
    PLEXUS_ASSIGN_OR_RETURN(ModelState delta, std::move(decoded));
    Update u{h.client_id, h.task_id, h.base_version, h.num_examples, h.local_steps, h.metrics, std::move(delta)};
    UploadAck ack{engine_->model().version(), std::nullopt};
    PLEXUS_RETURN_IF_ERROR(engine_->Submit(u));
    if (h.want_next_task && answer_with_uploads_) {
      PLEXUS_ASSIGN_OR_RETURN(PollAnswer next, engine_->Poll(h.client_id));
      if (next.kind != PollAnswer::Kind::kWait) ack.next = next;
    }
    return ack;
  }

  Status ReportEvaluation(const std::string& id, const std::string& task_id, const Evaluation& e) override {
    reports.push_back({id, task_id, e});
    return refuse_reports ? NotFoundError("injected: that evaluation closed") : Status::Ok();
  }
  struct Report {
    std::string client_id, task_id;
    Evaluation evaluation;
  };

  std::deque<Task> evaluation_tasks;  // handed out by the next polls
  int refuse_uploads = 0;             // the next uploads are refused
  std::vector<std::string> uploaded_tasks;
  std::vector<Report> reports;
  bool refuse_reports = false;
  std::deque<bool> failures;  // next calls fail while the front is true
  size_t drop_download_after_ = 0;
  std::vector<size_t> resumed_from_;
  std::function<void()> on_failure;   // e.g. the time a failing call takes
  bool answer_with_uploads_ = false;  // hand the next poll's answer back with an upload, as the server does
  int polls_ = 0;
  std::vector<bool> uploads_resuming_;     // UploadHeader::resume of each upload that reached the transport
  std::string upload_codec_;               // what tasks name
  std::vector<std::string> codecs_used_;   // UploadHeader::codec of each upload
  std::string download_codec_;             // what tasks name
  std::unique_ptr<CodedDownloads> coded_;  // null: no coded downloads in this transport
  std::vector<std::string> coded_bases_;   // the base each coded download named
  bool corrupt_coded_ = false;

 private:
  bool Fail() {
    if (failures.empty()) return false;
    const bool f = failures.front();
    failures.pop_front();
    if (f && on_failure) on_failure();
    return f;
  }
  SyncEngine* engine_;
  Store* store_;
};

class ClientRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SyncOptions o;
    o.rounds = 2;
    o.clients_per_round = 1;
    o.min_clients = 1;
    ModelState initial = *ModelState::Create({{"w", {3}}});
    engine_ = *SyncEngine::Open(o, initial, &store_, &clock_, nullptr, nullptr);
    data_.labels.assign(5, 0);
    data_.features.assign(5 * 784, 0.0f);
  }

  ClientOptions Options() {
    ClientOptions o;
    o.client_id = "edge-1";
    o.sleep = [this](int64_t ms) {
      slept_ms_ += ms;
      client_clock_.AdvanceMs(ms);
    };
    o.clock = &client_clock_;
    return o;
  }

  TrainerFactory Factory() {
    return [](const std::string&) -> Result<std::unique_ptr<Trainer>> {
      return std::unique_ptr<Trainer>(new AddOneTrainer);
    };
  }

  // A one-round, one-client sync federation of a 3-value model in `store`.
  std::unique_ptr<SyncEngine> OneRound(MemoryStore* store, int64_t round_deadline_ms) {
    SyncOptions so;
    so.rounds = 1;
    so.clients_per_round = 1;
    so.min_clients = 1;
    so.round_deadline_ms = round_deadline_ms;
    return *SyncEngine::Open(so, *ModelState::Create({{"w", {3}}}), store, &clock_, nullptr, nullptr);
  }
  // Options whose waits move the server's time too (and tick `engine`), each noted in `sleeps`.
  ClientOptions ServerTimeFollows(SyncEngine* engine, std::vector<int64_t>* sleeps = nullptr) {
    ClientOptions o = Options();
    o.sleep = [this, engine, sleeps](int64_t ms) {
      if (sleeps) sleeps->push_back(ms);
      client_clock_.AdvanceMs(ms);
      clock_.AdvanceMs(ms);
      ASSERT_OK(engine->Tick());
    };
    return o;
  }

  ManualClock clock_;
  ManualClock client_clock_;  // the client's: its sleeps and failing calls move it
  MemoryStore store_;
  std::unique_ptr<SyncEngine> engine_;
  Dataset data_;
  int64_t slept_ms_ = 0;
};

TEST_F(ClientRuntimeTest, TrainsEveryRoundAndStopsWhenFinished) {
  InProcessTransport transport(engine_.get(), &store_);
  ClientRuntime client(Options(), &transport, Factory(), DatasetView::All(data_));
  Result<ClientSummary> s = client.Run();
  ASSERT_OK(s);
  EXPECT_EQ(s->client_id, "edge-1");
  EXPECT_EQ(s->tasks_completed, 2);
  EXPECT_EQ(s->downloads, 2);
  EXPECT_TRUE(engine_->finished());
  EXPECT_FLOAT_EQ(engine_->model().data()[0], 2.0f);  // +1 per round
}

TEST_F(ClientRuntimeTest, AnswersEvaluationTasksOnItsHeldOutDataAndTrainsOn) {
  InProcessTransport transport(engine_.get(), &store_);
  Task eval;
  eval.task_id = "eval-v0-edge-1";
  eval.model_version = 0;
  eval.model_sha256 = engine_->model().ContentSha256();
  eval.evaluate_only = true;
  transport.evaluation_tasks = {eval, eval};
  transport.evaluation_tasks.back().task_id = "eval-v0-again";
  Dataset held_out = data_;
  held_out.labels.resize(3);
  held_out.features.resize(3 * 784);
  ClientOptions o = Options();
  o.eval_data = DatasetView::All(held_out);
  ClientRuntime client(o, &transport, Factory(), DatasetView::All(data_));
  Result<ClientSummary> s = client.Run();
  ASSERT_OK(s);
  EXPECT_EQ(s->evaluations, 2);
  ASSERT_EQ(transport.reports.size(), 2u);
  EXPECT_EQ(transport.reports[0].client_id, "edge-1");
  EXPECT_EQ(transport.reports[0].task_id, "eval-v0-edge-1");
  EXPECT_EQ(transport.reports[0].evaluation.examples, 3);  // the held-out data, not the training data
  EXPECT_DOUBLE_EQ(transport.reports[0].evaluation.accuracy, 0.5);
  EXPECT_EQ(s->tasks_completed, 2);  // evaluation tasks are not training tasks
  EXPECT_TRUE(engine_->finished());
  EXPECT_FLOAT_EQ(engine_->model().data()[0], 2.0f);
}

TEST_F(ClientRuntimeTest, WithoutHeldOutDataOrWhenRefusedAnEvaluationChangesNothingElse) {
  InProcessTransport transport(engine_.get(), &store_);
  Task eval;
  eval.task_id = "eval-v0-edge-1";
  eval.model_sha256 = engine_->model().ContentSha256();
  eval.evaluate_only = true;
  transport.evaluation_tasks = {eval};
  transport.refuse_reports = true;  // the evaluation closed before the answer came
  ClientRuntime client(Options(), &transport, Factory(), DatasetView::All(data_));
  Result<ClientSummary> s = client.Run();
  ASSERT_OK(s);
  ASSERT_EQ(transport.reports.size(), 1u);
  EXPECT_EQ(transport.reports[0].evaluation.examples, 0);  // no evaluation split: weighs nothing
  EXPECT_EQ(s->evaluations, 0);
  EXPECT_EQ(s->tasks_completed, 2);
  EXPECT_TRUE(engine_->finished());
}

// Refused again and again for the same reason, a client once polled and trained at full pace;
// from the second refusal in a row it says why in one line and waits longer each time.
TEST_F(ClientRuntimeTest, RefusalsForTheSameReasonInARowMakeTheClientBackOff) {
  MemoryStore store;
  std::unique_ptr<SyncEngine> engine = OneRound(&store, 5000);
  InProcessTransport transport(engine.get(), &store);
  transport.refuse_uploads = 3;
  std::vector<int64_t> sleeps;
  ClientRuntime client(ServerTimeFollows(engine.get(), &sleeps), &transport, Factory(), DatasetView::All(data_));
  Result<ClientSummary> s = client.Run();
  ASSERT_OK(s);
  EXPECT_EQ(s->tasks_refused, 3);
  EXPECT_EQ(s->tasks_completed, 1);
  // The second refusal waits 2 s, the third 4 s; the first only polls (1 s at a time).
  EXPECT_EQ(std::count(sleeps.begin(), sleeps.end(), 2000), 1) << ::testing::PrintToString(sleeps);
  EXPECT_EQ(std::count(sleeps.begin(), sleeps.end(), 4000), 1) << ::testing::PrintToString(sleeps);
  EXPECT_TRUE(engine->finished());
}

TEST_F(ClientRuntimeTest, ATaskWhoseUpdateWasRefusedIsNotTrainedAgain) {
  // The sync round keeps handing the client its open task until the round's deadline; training
  // it again would only repeat the refused bytes. The client waits; the round is retried with a
  // new task after its deadline, which the client trains.
  MemoryStore store;
  std::unique_ptr<SyncEngine> engine = OneRound(&store, 20000);
  InProcessTransport transport(engine.get(), &store);
  transport.refuse_uploads = 1;
  ClientRuntime client(ServerTimeFollows(engine.get()), &transport, Factory(), DatasetView::All(data_));
  Result<ClientSummary> s = client.Run();
  ASSERT_OK(s);
  EXPECT_EQ(s->tasks_refused, 1);
  EXPECT_EQ(s->tasks_completed, 1);
  ASSERT_EQ(transport.uploaded_tasks.size(), 2u) << "the refused task was trained and sent again";
  EXPECT_NE(transport.uploaded_tasks[0], transport.uploaded_tasks[1]);
  EXPECT_GE(transport.polls_, 10);  // it kept asking, at most once a second, until the new task
  EXPECT_TRUE(engine->finished());
}

TEST_F(ClientRuntimeTest, ResumesADroppedDownloadFromItsOffset) {
  InProcessTransport transport(engine_.get(), &store_);
  transport.drop_download_after_ = 40;
  ClientRuntime client(Options(), &transport, Factory(), DatasetView::All(data_));
  ASSERT_OK(client.Run());
  ASSERT_GE(transport.resumed_from_.size(), 2u);
  EXPECT_EQ(transport.resumed_from_[0], 0u);
  EXPECT_EQ(transport.resumed_from_[1], 40u);  // the retry continued, it did not start over
  EXPECT_FLOAT_EQ(engine_->model().data()[0], 2.0f);
}

TEST_F(ClientRuntimeTest, TakesItsNextTaskFromTheUploadReplyInsteadOfPolling) {
  InProcessTransport transport(engine_.get(), &store_);
  transport.answer_with_uploads_ = true;
  ClientRuntime client(Options(), &transport, Factory(), DatasetView::All(data_));
  Result<ClientSummary> s = client.Run();
  ASSERT_OK(s);
  EXPECT_EQ(s->tasks_completed, 2);
  // The first task came from a poll; the second, and "finished", with the uploads.
  EXPECT_EQ(transport.polls_, 1);
  EXPECT_FLOAT_EQ(engine_->model().data()[0], 2.0f);
}

TEST_F(ClientRuntimeTest, OnlyARetriedUploadAsksToResume) {
  InProcessTransport transport(engine_.get(), &store_);
  transport.failures = {false, false, true};  // join, poll, then the first upload fails
  ClientRuntime client(Options(), &transport, Factory(), DatasetView::All(data_));
  ASSERT_OK(client.Run());
  EXPECT_EQ(transport.uploads_resuming_, (std::vector<bool>{false, true, false}));
  EXPECT_FLOAT_EQ(engine_->model().data()[0], 2.0f);
}

TEST_F(ClientRuntimeTest, BacksOffWhileTheServerIsDownThenCarriesOn) {
  InProcessTransport transport(engine_.get(), &store_);
  transport.failures = {true, true, true, false};  // join fails three times
  ClientRuntime client(Options(), &transport, Factory(), DatasetView::All(data_));
  ASSERT_OK(client.Run());
  // Exponential backoff with jitter: 200, 400, 800 ms each scaled into [0.5, 1).
  EXPECT_GE(slept_ms_, 700);
  EXPECT_LT(slept_ms_, 1400);
}

TEST_F(ClientRuntimeTest, GivesUpAfterTheConfiguredTime) {
  InProcessTransport transport(engine_.get(), &store_);
  transport.failures = std::deque<bool>(1000, true);
  ClientOptions o = Options();
  o.give_up_after_ms = 3000;
  ClientRuntime client(o, &transport, Factory(), DatasetView::All(data_));
  EXPECT_THAT(client.Run(), testing::StatusIs(StatusCode::kUnavailable, "giving up"));
  EXPECT_LE(slept_ms_, 3000);
}

TEST_F(ClientRuntimeTest, TimeInFailingCallsCountsTowardsGivingUp) {
  InProcessTransport transport(engine_.get(), &store_);
  transport.failures = std::deque<bool>(1000, true);
  transport.on_failure = [this] { client_clock_.AdvanceMs(2000); };  // each failing call hangs 2 s
  ClientOptions o = Options();
  o.give_up_after_ms = 5000;
  ClientRuntime client(o, &transport, Factory(), DatasetView::All(data_));
  EXPECT_THAT(client.Run(), testing::StatusIs(StatusCode::kUnavailable, "giving up"));
  // The stretch starts when the first failure is seen, and the last call may overrun the limit.
  EXPECT_LE(client_clock_.NowMs(), 2000 + 5000 + 2000);
  EXPECT_LT(slept_ms_, 1000);  // the sleeps alone would have gone on to 5 s
}

// A stop request during the backoff of a client whose server is down ends Run with Cancelled at
// the next sleep, long before it would give up.
TEST_F(ClientRuntimeTest, AStopRequestEndsTheBackoffAtOnce) {
  InProcessTransport transport(engine_.get(), &store_);
  transport.failures = std::deque<bool>(1000, true);
  std::atomic<bool> stop{false};
  int failed_calls = 0;
  transport.on_failure = [&] {
    if (++failed_calls == 3) stop.store(true);  // a signal arrives during the third failing call
  };
  ClientRuntime client(Options(), &transport, Factory(), DatasetView::All(data_));
  EXPECT_THAT(client.Run(&stop), testing::StatusIs(StatusCode::kCancelled, "stopped"));
  EXPECT_EQ(failed_calls, 3);
  EXPECT_EQ(transport.failures.size(), 997u);  // no call after the stop
}

// Training that diverges drops that task; the client goes on with the next one.
class DivergingOnceTrainer : public AddOneTrainer {
 public:
  Result<TrainOutcome> Train(const ModelState& start, const DatasetView& data, const TrainOptions& o) override {
    if (calls_++ == 0) return Status(StatusCode::kAborted, "training diverged (loss nan at step 3)");
    return AddOneTrainer::Train(start, data, o);
  }

 private:
  int calls_ = 0;
};

TEST_F(ClientRuntimeTest, DivergedTrainingDropsTheTaskAndGoesOn) {
  InProcessTransport transport(engine_.get(), &store_);
  TrainerFactory factory = [](const std::string&) -> Result<std::unique_ptr<Trainer>> {
    return std::unique_ptr<Trainer>(new DivergingOnceTrainer);
  };
  ClientRuntime client(Options(), &transport, factory, DatasetView::All(data_));
  Result<ClientSummary> s = client.Run();
  ASSERT_OK(s);  // it did not exit on the diverged task
  EXPECT_EQ(s->tasks_failed, 1);
  // The engine hands the same unfinished task out again; this time training succeeds.
  EXPECT_EQ(s->tasks_completed, 2);
  EXPECT_TRUE(engine_->finished());
  EXPECT_FLOAT_EQ(engine_->model().data()[0], 2.0f);
}

// A client with a state directory, stopped (as by a kill) at the first backoff after a failed
// call, then run again as a new process would: a new runtime and transport over the same
// directory and the same server.
class ClientRestartTest : public ClientRuntimeTest {
 protected:
  void SetUp() override {
    ClientRuntimeTest::SetUp();
    dir_ = ::testing::TempDir() + "/client_state_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    state_ = *ClientStateDir::Open(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  ClientOptions StateOptions() {
    ClientOptions o = Options();
    o.client_id.clear();  // the server names it; the restarted client finds the name on disk
    o.state = state_.get();
    return o;
  }

  // Trains with AddOneTrainer and counts the tasks trained.
  TrainerFactory CountingFactory() {
    return [this](const std::string&) -> Result<std::unique_ptr<Trainer>> {
      class Counting : public AddOneTrainer {
       public:
        explicit Counting(int* n) : n_(n) {}
        Result<TrainOutcome> Train(const ModelState& m, const DatasetView& d, const TrainOptions& o) override {
          ++*n_;
          return AddOneTrainer::Train(m, d, o);
        }

       private:
        int* n_;
      };
      return std::unique_ptr<Trainer>(new Counting(&trained_));
    };
  }

  // Runs a client that stops at its first backoff; returns how Run ended.
  Status RunUntilFirstFailure(InProcessTransport* transport) {
    std::atomic<bool> stop{false};
    ClientOptions o = StateOptions();
    o.sleep = [&stop](int64_t) { stop = true; };
    ClientRuntime client(o, transport, CountingFactory(), DatasetView::All(data_));
    return client.Run(&stop).status();
  }

  std::string dir_;
  std::unique_ptr<ClientStateDir> state_;
  int trained_ = 0;
};

TEST_F(ClientRestartTest, ARestartedClientResumesItsDownloadFromTheBytesOnDisk) {
  InProcessTransport first(engine_.get(), &store_);
  first.drop_download_after_ = 40;
  EXPECT_THAT(RunUntilFirstFailure(&first), testing::StatusIs(StatusCode::kCancelled, "stopped"));
  EXPECT_EQ(first.resumed_from_, (std::vector<size_t>{0}));
  EXPECT_EQ(trained_, 0);

  InProcessTransport second(engine_.get(), &store_);
  ClientRuntime client(StateOptions(), &second, CountingFactory(), DatasetView::All(data_));
  Result<ClientSummary> s = client.Run();
  ASSERT_OK(s);
  EXPECT_EQ(s->client_id, "client-1");  // the name the server gave the first run
  ASSERT_FALSE(second.resumed_from_.empty());
  EXPECT_EQ(second.resumed_from_[0], 40u);  // it continued from the first run's bytes
  EXPECT_EQ(s->tasks_completed, 2);
  EXPECT_TRUE(engine_->finished());
  EXPECT_FLOAT_EQ(engine_->model().data()[0], 2.0f);
}

// A kill between a download's last byte and its rename left the whole model as a partial file;
// every restart then resumed at its end, heard "stream ended early" and retried until it gave
// up. The partial that is the task's model is taken as it is.
TEST_F(ClientRestartTest, APartialFileHoldingTheWholeModelIsUsedNotResumed) {
  const std::string whole = EncodeSafetensors(*store_.Checkpoint(0));
  ASSERT_OK(state_->AppendModelBytes(0, 0, whole));
  InProcessTransport transport(engine_.get(), &store_);
  ClientRuntime client(StateOptions(), &transport, CountingFactory(), DatasetView::All(data_));
  Result<ClientSummary> s = client.Run();
  ASSERT_OK(s);
  ASSERT_FALSE(transport.resumed_from_.empty());                    // version 1's download
  for (size_t from : transport.resumed_from_) EXPECT_EQ(from, 0u);  // never a resume at the end
  EXPECT_EQ(s->tasks_completed, 2);
  EXPECT_TRUE(engine_->finished());
}

TEST_F(ClientRestartTest, ARestartedClientSendsTheUpdateItTrainedInsteadOfTrainingAgain) {
  InProcessTransport first(engine_.get(), &store_);
  first.failures = {false, false, true};  // join, poll, then the upload fails
  EXPECT_THAT(RunUntilFirstFailure(&first), testing::StatusIs(StatusCode::kCancelled, "stopped"));
  EXPECT_EQ(trained_, 1);
  EXPECT_EQ(engine_->model().version(), 0u);  // nothing arrived

  InProcessTransport second(engine_.get(), &store_);
  ClientRuntime client(StateOptions(), &second, CountingFactory(), DatasetView::All(data_));
  Result<ClientSummary> s = client.Run();
  ASSERT_OK(s);
  EXPECT_EQ(s->uploads_resumed_after_restart, 1);
  ASSERT_FALSE(second.uploads_resuming_.empty());
  EXPECT_TRUE(second.uploads_resuming_[0]);  // it asks what the server kept
  EXPECT_EQ(trained_, 2);                    // round 1 once (before the restart), round 2
  EXPECT_EQ(s->tasks_completed, 2);
  EXPECT_EQ(second.resumed_from_.size(), 1u);  // round 2's model only: round 1's was on disk
  EXPECT_TRUE(engine_->finished());
  EXPECT_FLOAT_EQ(engine_->model().data()[0], 2.0f);
  EXPECT_FALSE(state_->LoadPendingUpload().has_value());  // acknowledged, so forgotten
}

TEST_F(ClientRestartTest, AKeptUpdateOfAnotherClientIsDroppedAndTheClientGoesOn) {
  InProcessTransport first(engine_.get(), &store_);
  first.failures = {false, false, true};
  EXPECT_THAT(RunUntilFirstFailure(&first), testing::StatusIs(StatusCode::kCancelled, "stopped"));
  ASSERT_TRUE(state_->LoadPendingUpload().has_value());
  // Another client's name on the kept update (as if the directory were shared by mistake): the
  // restarted client does not send it as its own.
  PendingUpload kept = *state_->LoadPendingUpload();
  kept.header.client_id = "someone-else";
  ASSERT_OK(state_->SavePendingUpload(kept.header, *Payload::Of(kept.payload)));

  InProcessTransport second(engine_.get(), &store_);
  ClientRuntime client(StateOptions(), &second, CountingFactory(), DatasetView::All(data_));
  Result<ClientSummary> s = client.Run();
  ASSERT_OK(s);
  EXPECT_EQ(s->uploads_resumed_after_restart, 0);
  EXPECT_EQ(trained_, 3);  // round 1 trained again
  EXPECT_TRUE(engine_->finished());
}

TEST_F(ClientRuntimeTest, SendsItsUpdatesInTheCodecTheTaskNames) {
  InProcessTransport transport(engine_.get(), &store_);
  transport.upload_codec_ = "int8";
  ClientRuntime client(Options(), &transport, Factory(), DatasetView::All(data_));
  ASSERT_OK(client.Run());
  EXPECT_EQ(transport.codecs_used_, (std::vector<std::string>{"int8", "int8"}));
  EXPECT_NEAR(engine_->model().data()[0], 2.0f, 1e-5);  // +1 per round, int8 exact up to rounding
}

TEST_F(ClientRuntimeTest, DownloadsInTheTaskCodecAsChangesFromWhatItRebuilt) {
  InProcessTransport transport(engine_.get(), &store_);
  transport.download_codec_ = "int8";
  transport.coded_ = *CodedDownloads::Create("int8");
  ClientRuntime client(Options(), &transport, Factory(), DatasetView::All(data_));
  Result<ClientSummary> s = client.Run();
  ASSERT_OK(s);
  EXPECT_EQ(s->downloads, 2);
  // The first download names no model (the whole one comes); the second names what the client
  // rebuilt from the first, and no float32 download happened.
  ASSERT_EQ(transport.coded_bases_.size(), 2u);
  EXPECT_EQ(transport.coded_bases_[0], "");
  EXPECT_EQ(transport.coded_bases_[1].size(), 64u);
  EXPECT_TRUE(transport.resumed_from_.empty());
  EXPECT_NEAR(engine_->model().data()[0], 2.0f, 1e-5);  // +1 per round
}

TEST_F(ClientRuntimeTest, ACodedDownloadThatDoesNotRebuildWhatTheServerSaidIsReplacedByFloat32) {
  InProcessTransport transport(engine_.get(), &store_);
  transport.download_codec_ = "int8";
  transport.coded_ = *CodedDownloads::Create("int8");
  transport.corrupt_coded_ = true;
  ClientRuntime client(Options(), &transport, Factory(), DatasetView::All(data_));
  ASSERT_OK(client.Run());
  EXPECT_EQ(transport.coded_bases_.size(), 2u);
  EXPECT_EQ(transport.resumed_from_.size(), 2u);  // each task's model then came in float32
  EXPECT_FLOAT_EQ(engine_->model().data()[0], 2.0f);
}

TEST_F(ClientRestartTest, TopKErrorFeedbackIsKeptAcrossARestart) {
  InProcessTransport first(engine_.get(), &store_);
  first.upload_codec_ = "topk:ratio=0.33";  // one of the three values per task
  first.failures = {false, false, true};    // join, poll, then the upload fails: stop
  EXPECT_THAT(RunUntilFirstFailure(&first), testing::StatusIs(StatusCode::kCancelled, "stopped"));
  // Sent: one value of the +1 delta; the other two wait in the residual, on disk.
  std::optional<ModelState> residual = state_->LoadResidual();
  ASSERT_TRUE(residual.has_value());
  float kept = 0;
  for (float r : residual->data()) kept += r;
  EXPECT_FLOAT_EQ(kept, 2.0f);

  InProcessTransport second(engine_.get(), &store_);
  second.upload_codec_ = "topk:ratio=0.33";
  ClientRuntime client(StateOptions(), &second, CountingFactory(), DatasetView::All(data_));
  ASSERT_OK(client.Run());
  // Round 1 merged the kept update's single value; round 2's upload carried the residual too
  // (1 + 1 of feedback + 1 new = the largest value, sent in full).
  EXPECT_TRUE(engine_->finished());
  float total = 0;
  for (float w : engine_->model().data()) total += w;
  std::optional<ModelState> left = state_->LoadResidual();
  ASSERT_TRUE(left.has_value());
  float still_kept = 0;
  for (float r : left->data()) still_kept += r;
  EXPECT_FLOAT_EQ(total + still_kept, 6.0f);  // two tasks of +1 on three values: nothing lost
}

// Three steps per task, each asking the step hook first, as the real trainers do.
class ThreeStepTrainer : public AddOneTrainer {
 public:
  Result<TrainOutcome> Train(const ModelState& start, const DatasetView& data, const TrainOptions& o) override {
    for (int64_t step = 0; step < 3; ++step) {
      if (o.before_step) PLEXUS_RETURN_IF_ERROR(o.before_step(step));
      ++steps_run;
    }
    return AddOneTrainer::Train(start, data, o);
  }
  static inline int steps_run = 0;
};

TEST_F(ClientRuntimeTest, TheDevicePolicyDeclinesTasksAndPausesARunningOneAtAStep) {
  InProcessTransport transport(engine_.get(), &store_);
  ThreeStepTrainer::steps_run = 0;
  TrainerFactory factory = [](const std::string&) -> Result<std::unique_ptr<Trainer>> {
    return std::unique_ptr<Trainer>(new ThreeStepTrainer);
  };
  // The device says no at first (no task taken), yes for the first task's first step, then no
  // for two checks in the middle of that task, then yes from then on.
  std::vector<std::string> answers{"battery at 5%", "battery at 5%", "", "", "hot", "hot", ""};
  size_t asked = 0;
  std::vector<int> steps_when_blocked;
  ClientOptions o = Options();
  o.device_check_ms = 1000;
  o.device_blocked = [&] {
    const std::string a = asked < answers.size() ? answers[asked] : "";
    ++asked;
    if (!a.empty()) steps_when_blocked.push_back(ThreeStepTrainer::steps_run);
    return a;
  };
  ClientRuntime client(o, &transport, factory, DatasetView::All(data_));
  Result<ClientSummary> s = client.Run();
  ASSERT_OK(s);
  EXPECT_GE(asked, answers.size());  // every scripted answer was used
  // No step ran before the device first said yes; the pause came after the first step.
  EXPECT_EQ(steps_when_blocked, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(slept_ms_, 4000);  // four checks that said no, a second each
  EXPECT_EQ(s->pauses, 1);
  EXPECT_EQ(s->tasks_completed, 2);
  EXPECT_EQ(ThreeStepTrainer::steps_run, 6);  // the paused task ran all its steps, none twice
  EXPECT_TRUE(engine_->finished());
  EXPECT_FLOAT_EQ(engine_->model().data()[0], 2.0f);
}

}  // namespace
}  // namespace plexus
