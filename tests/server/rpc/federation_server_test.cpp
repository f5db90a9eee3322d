// The gRPC service in-process on 127.0.0.1: bad uploads get the right status and clear
// messages, and nothing already accepted is lost.
#include "server/rpc/federation_server.h"

#include "core/clock.h"
#include "server/coordinator/async_engine.h"
#include "server/coordinator/sync_engine.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "client/grpc_transport.h"
#include "compression/codec.h"
#include "core/safetensors.h"
#include "plexus/v1/federation.grpc.pb.h"
#include "server/store/memory_store.h"
#include "server/store/store_wrapper.h"
#include "tests/testing/heap_block_lender.h"
#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

// A delta shaped like `like` whose value i is (i % period) * step: a large upload whose bytes
// would show a chunk landing at the wrong offset.
ModelState PatternDelta(const ModelState& like, size_t period, float step) {
  ModelState delta = ModelState::ZerosLike(like);
  for (size_t i = 0; i < delta.num_params(); ++i) delta.data()[i] = static_cast<float>(i % period) * step;
  return delta;
}

UploadHeader HeaderFor(const std::string& client, const Task& t) {
  UploadHeader h;
  h.client_id = client;
  h.task_id = t.task_id;
  h.base_version = t.model_version;
  h.num_examples = 10;
  return h;
}

// A model of `m`'s layout with every value `v`.
ModelState FilledLike(const ModelState& m, float v) {
  ModelState out = ModelState::ZerosLike(m);
  for (float& x : out.data()) x = v;
  return out;
}

class FederationServerTest : public ::testing::Test {
 protected:
  // Door limits for the server SetUp starts; tests that need others set them first and call Restart.
  DoorLimits limits_;
  void SetUp() override {
    SyncOptions o;
    o.rounds = 1;
    o.clients_per_round = 2;
    o.min_clients = 2;
    model_ = *ModelState::Create({{"w", {4}}, {"b", {2}}});
    engine_ = *SyncEngine::Open(o, model_, &store_, &clock_, nullptr, nullptr);
    server_ = *FederationServer::Start("127.0.0.1:0", engine_.get(), &store_, {"tiny", 1}, {}, limits_);
    target_ = "127.0.0.1:" + std::to_string(server_->port());
    transport_ = MakeGrpcFederationTransport(target_);
    ASSERT_OK(transport_->Join("a", 10, "test"));
    ASSERT_OK(transport_->Join("b", 10, "test"));
    task_a_ = transport_->Poll("a", 1000)->task;
    task_b_ = transport_->Poll("b", 1000)->task;
  }
  void TearDown() override { server_->Shutdown(); }

  UploadHeader Header(const std::string& client, const Task& t) { return HeaderFor(client, t); }
  std::string Delta(float v) {
    ModelState d = ModelState::ZerosLike(model_);
    for (float& x : d.data()) x = v;
    return EncodeSafetensors(d);
  }

  RealClock clock_;
  MemoryStore store_;
  ModelState model_;
  std::unique_ptr<SyncEngine> engine_;
  std::unique_ptr<FederationServer> server_;
  std::string target_;
  std::unique_ptr<FederationTransport> transport_;
  Task task_a_, task_b_;
};

// A process driving the engine beside the clients (an edge's upstream) waits for a round to close
// without looking on a timer: the wait is woken by the upload that closes it.
TEST_F(FederationServerTest, AWaitForTheEngineEndsWhenAnUploadClosesTheRound) {
  EXPECT_FALSE(server_->WaitForEngine([](Engine& e) { return e.model().version() >= 1; }, 10));  // not yet
  bool closed = false;
  std::thread waiter(
      [&] { closed = server_->WaitForEngine([](Engine& e) { return e.model().version() >= 1; }, 600000); });
  ASSERT_OK(transport_->Upload(Header("a", task_a_), Delta(1.0f)));
  ASSERT_OK(transport_->Upload(Header("b", task_b_), Delta(3.0f)));  // closes round 1
  waiter.join();                                                     // would wait ten minutes were it not woken
  EXPECT_TRUE(closed);
  EXPECT_EQ(engine_->model().version(), 1u);
}

TEST_F(FederationServerTest, TasksCarryTheModelAndItDownloads) {
  EXPECT_EQ(task_a_.model_version, 0u);
  EXPECT_EQ(task_a_.model_sha256, model_.ContentSha256());
  EXPECT_EQ(task_a_.model_crc32c, model_.ContentCrc32c());  // over the wire (TrainingTask.model_crc32c)
  std::string bytes;
  StringDownloadSink whole(&bytes);
  ASSERT_OK(transport_->Download(0, &whole));
  EXPECT_EQ(bytes.size(), whole.total());
  EXPECT_EQ(DecodeSafetensors(bytes)->ContentSha256(), model_.ContentSha256());
  // Resume from an offset: only the rest arrives.
  std::string tail = bytes.substr(0, 20);
  StringDownloadSink rest(&tail);
  ASSERT_OK(transport_->Download(0, &rest));
  EXPECT_EQ(tail, bytes);
  // Decoded as it arrives, and checked against the task's hash, resumed after 20 bytes too.
  ModelDownloadSink model;
  model.Prefill(bytes.substr(0, 20));
  ASSERT_OK(transport_->Download(0, &model));
  Result<ModelState> decoded = std::move(model).Finish(task_a_.model_sha256);
  ASSERT_OK(decoded.status());
  EXPECT_EQ(*decoded, model_);
  ModelDownloadSink other;
  ASSERT_OK(transport_->Download(0, &other));
  EXPECT_THAT(std::move(other).Finish(std::string(64, '0')), StatusIs(StatusCode::kDataLoss, "SHA-256"));
  // Kept bytes that are not a model: DataLoss with the first chunk (the caller starts over).
  ModelDownloadSink junk;
  junk.Prefill(std::string(20, '\xff'));
  EXPECT_THAT(transport_->Download(0, &junk), StatusIs(StatusCode::kDataLoss, "the bytes kept do not decode"));
  junk.Reset();
  ASSERT_OK(transport_->Download(0, &junk));
  EXPECT_EQ(*std::move(junk).Finish(task_a_.model_sha256), model_);
  std::string none;
  StringDownloadSink nothing(&none);
  EXPECT_THAT(transport_->Download(42, &nothing), StatusIs(StatusCode::kNotFound, "version 42"));
}

TEST_F(FederationServerTest, BadUploadsAreRefusedAndAcceptedOnesKept) {
  ASSERT_OK(transport_->Upload(Header("a", task_a_), Delta(1.0f)));

  EXPECT_THAT(transport_->Upload(Header("b", task_b_), "not safetensors"),
              StatusIs(StatusCode::kInvalidArgument, "malformed safetensors"));
  ModelState wrong = *ModelState::Create({{"w", {5}}, {"b", {2}}});
  EXPECT_THAT(transport_->Upload(Header("b", task_b_), EncodeSafetensors(wrong)),
              StatusIs(StatusCode::kInvalidArgument, "tensor 'w' has shape [5], expected [4]"));
  EXPECT_THAT(transport_->Upload(Header("b", task_b_), Delta(std::nanf(""))),
              StatusIs(StatusCode::kInvalidArgument, "non-finite"));
  UploadHeader unknown = Header("b", task_b_);
  unknown.task_id = "r7a0-b";
  EXPECT_THAT(transport_->Upload(unknown, Delta(1.0f)), StatusIs(StatusCode::kNotFound, "unknown task id 'r7a0-b'"));
  EXPECT_THAT(transport_->Upload(Header("a", task_b_), Delta(1.0f)),
              StatusIs(StatusCode::kPermissionDenied, "belongs to another client"));
  EXPECT_THAT(transport_->Upload(Header("b", task_b_), std::string(4 << 20, 'x')),
              StatusIs(StatusCode::kResourceExhausted, "exceeds the limit"));
  EXPECT_THAT(transport_->Poll("stranger", 10), StatusIs(StatusCode::kNotFound, "join first"));

  EXPECT_EQ(server_->status().updates_accepted, 1);
  EXPECT_EQ(server_->status().round_received, 1);
  // Every refusal is counted by its status code in the admin status.
  auto stub = v1::Federation::NewStub(grpc::CreateChannel(target_, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::StatusReply status;
  ASSERT_TRUE(stub->GetStatus(&ctx, v1::StatusRequest(), &status).ok());
  EXPECT_EQ(status.refusals().at("INVALID_ARGUMENT"), 3);
  EXPECT_EQ(status.refusals().at("NOT_FOUND"), 2);
  EXPECT_EQ(status.refusals().at("PERMISSION_DENIED"), 1);
  EXPECT_EQ(status.refusals().at("RESOURCE_EXHAUSTED"), 1);
  ASSERT_OK(transport_->Upload(Header("b", task_b_), Delta(3.0f)));
  EXPECT_TRUE(server_->status().finished);
  EXPECT_FLOAT_EQ(engine_->model().data()[0], 2.0f);  // (1 + 3) / 2: the bad uploads left no trace
  EXPECT_EQ(transport_->Poll("a", 10)->kind, PollAnswer::Kind::kFinished);
}

TEST_F(FederationServerTest, UploadWithoutHeaderOrShortPayloadIsRefused) {
  auto stub = v1::Federation::NewStub(grpc::CreateChannel(target_, grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext ctx;
    v1::UploadReply rep;
    auto w = stub->UploadUpdate(&ctx, &rep);
    v1::UpdateChunk c;
    c.set_data("abc");
    w->Write(c);
    w->WritesDone();
    grpc::Status s = w->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("must start with a header"), std::string::npos);
  }
  {
    grpc::ClientContext ctx;
    v1::UploadReply rep;
    auto w = stub->UploadUpdate(&ctx, &rep);
    v1::UpdateChunk c;
    c.mutable_header()->set_client_id("b");
    c.mutable_header()->set_task_id(task_b_.task_id);
    c.mutable_header()->set_total_bytes(100);
    w->Write(c);
    v1::UpdateChunk d;
    d.set_data("0123456789");
    w->Write(d);
    w->WritesDone();
    grpc::Status s = w->Finish();
    // Refused as soon as the header cannot be one (it is decoded as it arrives), not kept.
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("malformed safetensors: header length"), std::string::npos) << s.error_message();
  }
  {
    // Empty data chunks are refused: as progress they would keep a stalled upload's place.
    grpc::ClientContext ctx;
    v1::UploadReply rep;
    auto w = stub->UploadUpdate(&ctx, &rep);
    v1::UpdateChunk c;
    c.mutable_header()->set_client_id("b");
    c.mutable_header()->set_task_id(task_b_.task_id);
    c.mutable_header()->set_total_bytes(Delta(1.0f).size());
    w->Write(c);
    w->Write(v1::UpdateChunk());
    w->WritesDone();
    grpc::Status s = w->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("neither a header nor data"), std::string::npos) << s.error_message();
  }
}

class DoorLimitsTest : public FederationServerTest {
 protected:
  void SetUp() override {
    limits_.requests_per_s = 0.001;
    limits_.burst = 2;
    FederationServerTest::SetUp();  // each client joined and polled: its burst is spent
  }
};

// One upload place, taken by a client that sends a header and ten bytes, then nothing.
class StalledUploadTest : public FederationServerTest {
 protected:
  void SetUp() override {
    limits_.max_concurrent_uploads = 1;
    FederationServerTest::SetUp();
    stub_ = v1::Federation::NewStub(grpc::CreateChannel(target_, grpc::InsecureChannelCredentials()));
  }
  // The server again on the same port with limits_ (and `clock` for its time: null, real time).
  void Restart(const Clock* clock = nullptr) {
    server_->Shutdown();
    server_.reset();
    auto started = FederationServer::Start(target_, engine_.get(), &store_, {"tiny", 1}, {}, limits_, clock);
    ASSERT_OK(started);
    server_ = std::move(started).value();
  }
  void TearDown() override {
    stalled_ctx_.TryCancel();
    if (stalled_) stalled_->Finish();
    FederationServerTest::TearDown();
  }
  v1::UpdateChunk HeaderChunk(const std::string& client, const Task& t) {
    v1::UpdateChunk c;
    v1::UpdateHeader* h = c.mutable_header();
    h->set_client_id(client);
    h->set_task_id(t.task_id);
    h->set_base_version(t.model_version);
    h->set_num_examples(10);
    h->set_encoding(v1::ENCODING_DELTA_SAFETENSORS_F32);
    h->set_total_bytes(Delta(1.0f).size());
    return c;
  }
  // Starts a's stalled upload and returns once the server holds it in the upload place: a
  // second upload by a is then refused at once as "already has an upload in flight". The probe
  // waits until the server counts the stalled upload's ten bytes (only an upload holding a place
  // counts them): a probe that got in first would have had the stalled upload refused as the
  // second one (a loaded machine once delivered them in that order).
  void StallAnUploadOfA() {
    const int64_t received_before = ReceivedBytes();
    stalled_ = stub_->UploadUpdate(&stalled_ctx_, &stalled_reply_);
    ASSERT_TRUE(stalled_->Write(HeaderChunk("a", task_a_)));
    v1::UpdateChunk d;
    d.set_data(Delta(1.0f).substr(0, 10));
    ASSERT_TRUE(stalled_->Write(d));
    for (int attempt = 0; ReceivedBytes() < received_before + 10; ++attempt) {
      ASSERT_LT(attempt, 3000) << "the server never received the stalled upload's bytes";
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    for (int attempt = 0; attempt < 1000; ++attempt) {
      grpc::ClientContext ctx;
      v1::UploadReply rep;
      auto w = stub_->UploadUpdate(&ctx, &rep);
      w->Write(HeaderChunk("a", task_a_));
      w->WritesDone();
      const grpc::Status s = w->Finish();
      if (s.error_message().find("already has an upload in flight") != std::string::npos) {
        EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    FAIL() << "the stalled upload never took the upload place";
  }

  int64_t ReceivedBytes() {
    grpc::ClientContext ctx;
    v1::StatusReply r;
    EXPECT_TRUE(stub_->GetStatus(&ctx, v1::StatusRequest(), &r).ok());
    return static_cast<int64_t>(r.upload_bytes_received());
  }

  ManualClock server_clock_{1000000};  // for tests that Restart with it; outlives the server's threads
  std::unique_ptr<v1::Federation::Stub> stub_;
  grpc::ClientContext stalled_ctx_;
  v1::UploadReply stalled_reply_;
  std::unique_ptr<grpc::ClientWriter<v1::UpdateChunk>> stalled_;
};

// Eight such uploads once made every other upload wait until they ended: a stalled one now
// loses its place after --upload-stall-ms and keeps what arrived for a resume.
TEST_F(StalledUploadTest, AStalledUploadLosesItsPlaceAndOthersGoOn) {
  // The server's time is a manual clock, so the stall begins when the test says, after
  // StallAnUploadOfA has seen the place taken (a real-time window of 300 ms once ran out before
  // its first probe came back, on a loaded machine). Its request buckets would not refill on a
  // clock that stands still: no request limit here.
  limits_.upload_stall_ms = 1000;
  limits_.upload_slot_wait_ms = 60000;
  limits_.requests_per_s = 0;
  Restart(&server_clock_);
  StallAnUploadOfA();
  server_clock_.AdvanceMs(1000);  // a's upload has now delivered nothing for the stall bound
  // b waits for the place until the stalled upload is cancelled, then gets through.
  ASSERT_OK(transport_->Upload(Header("b", task_b_), Delta(2.0f)));
  EXPECT_EQ(stalled_->Finish().error_code(), grpc::StatusCode::CANCELLED);
  stalled_.reset();
  EXPECT_EQ(server_->status().updates_accepted, 1);
  // a's ten bytes are held for its resume.
  grpc::ClientContext ctx;
  v1::UploadStatusRequest req;
  req.set_client_id("a");
  req.set_task_id(task_a_.task_id);
  req.set_total_bytes(Delta(1.0f).size());
  v1::UploadStatusReply rep;
  ASSERT_TRUE(stub_->UploadStatus(&ctx, req, &rep).ok());
  EXPECT_EQ(rep.received_bytes(), 10u);
}

// Partial uploads are kept for resumes, so they take the server's memory: only a joined client's
// upload for its own open task gets as far as a place, and nothing of any other is received.
TEST_F(StalledUploadTest, UploadsOfStrangersOrForOthersTasksAreRefusedBeforeAnyByteIsKept) {
  auto upload_ten_bytes = [&](const std::string& client, const Task& t) {
    grpc::ClientContext ctx;
    v1::UploadReply rep;
    auto w = stub_->UploadUpdate(&ctx, &rep);
    w->Write(HeaderChunk(client, t));
    v1::UpdateChunk d;
    d.set_data(Delta(1.0f).substr(0, 10));
    w->Write(d);
    w->WritesDone();
    return w->Finish();
  };
  const grpc::Status others = upload_ten_bytes("a", task_b_);
  EXPECT_EQ(others.error_code(), grpc::StatusCode::PERMISSION_DENIED) << others.error_message();
  EXPECT_NE(others.error_message().find("belongs to another client"), std::string::npos) << others.error_message();
  const grpc::Status stranger = upload_ten_bytes("mallory", task_b_);
  EXPECT_EQ(stranger.error_code(), grpc::StatusCode::NOT_FOUND) << stranger.error_message();
  EXPECT_NE(stranger.error_message().find("join first"), std::string::npos) << stranger.error_message();
  Task unknown = task_a_;
  unknown.task_id = "r9a0-a";
  EXPECT_EQ(upload_ten_bytes("a", unknown).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(server_->metrics().received_upload_bytes, 0);
  for (const auto& [client, task] :
       {std::pair{"a", task_b_.task_id}, std::pair{"mallory", task_b_.task_id}, std::pair{"a", unknown.task_id}}) {
    grpc::ClientContext ctx;
    v1::UploadStatusRequest req;
    req.set_client_id(client);
    req.set_task_id(task);
    req.set_total_bytes(Delta(1.0f).size());
    v1::UploadStatusReply rep;
    ASSERT_TRUE(stub_->UploadStatus(&ctx, req, &rep).ok());
    EXPECT_EQ(rep.received_bytes(), 0u) << client << " " << task;
  }
  // The client's own upload, cut after ten bytes, is kept for its resume.
  EXPECT_EQ(upload_ten_bytes("a", task_a_).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(server_->metrics().received_upload_bytes, 10);
}

// A drip of one byte per 100 ms never stalls for --upload-stall-ms, and once held its place for
// as long as it liked (eight of them stopped every upload and every version). Below the minimum
// rate over a window it is cut like a silent upload, and the waiting upload gets through.
TEST_F(StalledUploadTest, ADripBelowTheMinimumRateLosesItsPlace) {
  limits_.upload_stall_ms = 60000;
  limits_.upload_slot_wait_ms = 20000;
  limits_.upload_min_bytes_per_s = 100;
  limits_.upload_rate_window_ms = 1500;  // long enough for StallAnUploadOfA to see the place taken
  Restart();
  StallAnUploadOfA();  // the header and ten bytes
  const std::string payload = Delta(1.0f);
  std::atomic<bool> stop{false};
  std::thread drip([&] {
    for (size_t i = 10; i + 1 < payload.size() && !stop; ++i) {
      v1::UpdateChunk d;
      d.set_data(payload.substr(i, 1));
      if (!stalled_->Write(d)) return;  // cancelled
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  const Status b = transport_->Upload(Header("b", task_b_), Delta(2.0f)).status();
  stop = true;
  drip.join();
  ASSERT_OK(b);
  EXPECT_EQ(stalled_->Finish().error_code(), grpc::StatusCode::CANCELLED);
  stalled_.reset();
  EXPECT_EQ(server_->status().updates_accepted, 1);
}

TEST_F(StalledUploadTest, AnUploadThatCannotGetAPlaceInTimeIsRefused) {
  limits_.upload_stall_ms = 0;
  limits_.upload_slot_wait_ms = 200;
  Restart();
  StallAnUploadOfA();
  EXPECT_THAT(transport_->Upload(Header("b", task_b_), Delta(2.0f)),
              StatusIs(StatusCode::kResourceExhausted, "upload places stayed busy"));
  EXPECT_EQ(server_->status().updates_accepted, 0);
}

TEST_F(DoorLimitsTest, NormBoundAndRateLimitRefuseWithClearMessages) {
  // Uploads get their own check of the limit before anything is read.
  EXPECT_THAT(transport_->Upload(Header("a", task_a_), Delta(3.0f)),
              StatusIs(StatusCode::kResourceExhausted, "over the server's limit"));
  EXPECT_THAT(transport_->Poll("b", 10), StatusIs(StatusCode::kResourceExhausted, "requests per second"));
  EXPECT_EQ(server_->status().updates_accepted, 0);
}

// A one-round, one-client federation of a 4-value model served with the given door limits.
struct OneClientServer {
  explicit OneClientServer(const DoorLimits& limits) {
    SyncOptions o;
    o.rounds = 1;
    o.clients_per_round = 1;
    o.min_clients = 1;
    engine = *SyncEngine::Open(o, model, &store, &clock, nullptr, nullptr);
    server = *FederationServer::Start("127.0.0.1:0", engine.get(), &store, {"tiny", 1}, {}, limits);
    target = "127.0.0.1:" + std::to_string(server->port());
  }
  ~OneClientServer() { server->Shutdown(); }

  RealClock clock;
  MemoryStore store;
  const ModelState model = *ModelState::Create({{"w", {4}}});
  std::unique_ptr<SyncEngine> engine;
  std::unique_ptr<FederationServer> server;
  std::string target;
};

// An operator sees a secure round's stage in the status (plexus status --server shows it).
TEST(SecureStatusTest, TheStatusNamesTheOpenSecureRoundsStage) {
  RealClock clock;
  MemoryStore store;
  SyncOptions o;
  o.rounds = 1;
  o.clients_per_round = 3;
  o.min_clients = 3;
  o.secagg = *SecAggSettings::Parse("clip=0.5");
  auto engine = *SyncEngine::Open(o, *ModelState::Create({{"w", {4}}}), &store, &clock, nullptr, nullptr);
  auto server = *FederationServer::Start("127.0.0.1:0", engine.get(), &store, {"tiny", 1}, {}, DoorLimits{});
  const std::string target = "127.0.0.1:" + std::to_string(server->port());
  auto status = [&] {
    auto stub = v1::Federation::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    v1::StatusReply reply;
    EXPECT_TRUE(stub->GetStatus(&ctx, v1::StatusRequest(), &reply).ok());
    return reply;
  };
  EXPECT_EQ(status().secure_stage(), "");  // no round open yet
  auto transport = MakeGrpcFederationTransport(target);
  for (const char* c : {"a", "b", "c"}) ASSERT_OK(transport->Join(c, 10, "test").status());
  for (const char* c : {"a", "b", "c"}) ASSERT_TRUE(transport->Poll(c, 1000).ok()) << c;
  const v1::StatusReply reply = status();
  EXPECT_EQ(reply.secure_stage(), "advertise keys");
  EXPECT_EQ(reply.secure_rounds_aborted(), 0);
  server->Shutdown();
}

TEST(LongPollCapTest, PollsBeyondTheCapAreToldToComeBack) {
  RealClock clock;
  MemoryStore store;
  const ModelState model = *ModelState::Create({{"w", {4}}});
  SyncOptions o;
  o.rounds = 1;
  o.clients_per_round = 3;
  o.min_clients = 3;  // two clients never make a round: their polls wait
  auto engine = *SyncEngine::Open(o, model, &store, &clock, nullptr, nullptr);
  DoorLimits limits;
  limits.max_long_polls = 1;
  auto server = *FederationServer::Start("127.0.0.1:0", engine.get(), &store, {"tiny", 1}, {}, limits);
  auto transport = MakeGrpcFederationTransport("127.0.0.1:" + std::to_string(server->port()));
  ASSERT_OK(transport->Join("a", 10, "test"));
  ASSERT_OK(transport->Join("b", 10, "test"));
  std::thread waiting([&] { EXPECT_OK(transport->Poll("a", 2000).status()); });
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (server->metrics().open_polls == 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(server->metrics().open_polls, 1);
  EXPECT_THAT(transport->Poll("b", 10), StatusIs(StatusCode::kResourceExhausted, "--max-long-polls"));
  waiting.join();
  EXPECT_EQ(server->metrics().open_polls, 0);
  EXPECT_OK(transport->Poll("b", 10).status());  // a place is free again
  server->Shutdown();
}

TEST(DoorNormTest, UpdatesAboveTheNormBoundAreRefused) {
  DoorLimits limits;
  limits.max_update_norm = 5.0;
  OneClientServer fed(limits);
  const ModelState& model = fed.model;
  auto transport = MakeGrpcFederationTransport(fed.target);
  ASSERT_OK(transport->Join("a", 10, "test"));
  const Task t = transport->Poll("a", 1000)->task;
  UploadHeader h;
  h.client_id = "a";
  h.task_id = t.task_id;
  h.num_examples = 10;
  ModelState big = ModelState::ZerosLike(model);
  for (float& x : big.data()) x = 3.0f;  // norm 6
  EXPECT_THAT(transport->Upload(h, EncodeSafetensors(big)),
              StatusIs(StatusCode::kInvalidArgument, "above the server's bound of 5"));
  ModelState small = ModelState::ZerosLike(model);
  for (float& x : small.data()) x = 2.0f;  // norm 4
  ASSERT_OK(transport->Upload(h, EncodeSafetensors(small)));
  EXPECT_TRUE(fed.server->status().finished);
}

TEST(TokenAuthTest, TokensNameTheClientAndEverythingElseIsRefused) {
  DoorLimits limits;
  limits.tokens = std::make_shared<const TokenRegistry>(
      *TokenRegistry::Parse(TokenRegistry::EntryFor("alice", "secret-a") + "\n# a comment\n" +
                            TokenRegistry::EntryFor("bob", "secret-b") + "\n"));
  OneClientServer fed(limits);
  const std::string target = fed.target;
  auto transport_for = [&](const std::string& token) {
    ClientTls auth;
    auth.token = token;
    return MakeGrpcFederationTransport(target, auth);
  };
  EXPECT_EQ(transport_for("secret-a")->Join("", 10, "test")->client_id, "alice");  // the token names the client
  EXPECT_THAT(transport_for("")->Join("alice", 10, "test"),
              StatusIs(StatusCode::kUnauthenticated, "needs a client token"));
  EXPECT_THAT(transport_for("guess")->Join("alice", 10, "test"),
              StatusIs(StatusCode::kUnauthenticated, "unknown client token"));
  EXPECT_THAT(transport_for("secret-b")->Poll("alice", 10),
              StatusIs(StatusCode::kPermissionDenied, "cannot act as 'alice'"));
  EXPECT_EQ(transport_for("secret-a")->Poll("alice", 1000)->kind, PollAnswer::Kind::kTask);
}

// A status call as `plexus status` makes it, with a client token.
grpc::Status StatusAs(const std::string& target, const std::string& token) {
  auto stub = v1::Federation::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  v1::StatusReply r;
  return stub->GetStatus(&ctx, v1::StatusRequest(), &r);
}

// Door limits with tokens for alice ("secret-a") and mallory ("secret-m") and a revocation list
// at `path` holding `revoked`, read again whenever it changes.
DoorLimits AliceAndMallory(const std::string& path, const std::string& revoked) {
  std::ofstream(path) << revoked;
  DoorLimits limits;
  limits.tokens = std::make_shared<const TokenRegistry>(*TokenRegistry::Parse(
      TokenRegistry::EntryFor("alice", "secret-a") + "\n" + TokenRegistry::EntryFor("mallory", "secret-m") + "\n"));
  limits.revoked = *RevocationList::Open(path, /*recheck_ms=*/0);
  return limits;
}

// An operator may name a list that does not exist yet: nobody is revoked until it is written,
// then its names are. A path whose directory does not exist is a mistake and refused.
TEST(RevocationTest, AListNotWrittenYetRevokesNobodyUntilItIs) {
  const std::string path = ::testing::TempDir() + "/revoked_later_" + std::to_string(::getpid());
  std::filesystem::remove(path);
  Result<std::shared_ptr<RevocationList>> list = RevocationList::Open(path, /*recheck_ms=*/0);
  ASSERT_OK(list);
  EXPECT_FALSE((*list)->Revoked("mallory"));
  std::ofstream(path) << "mallory\n";
  EXPECT_TRUE((*list)->Revoked("mallory"));
  EXPECT_FALSE((*list)->Revoked("alice"));
  std::filesystem::remove(path);
  EXPECT_TRUE((*list)->Revoked("mallory"));  // a file that disappears leaves the list as it was
  EXPECT_THAT(
      RevocationList::Open(::testing::TempDir() + "/no_such_dir_" + std::to_string(::getpid()) + "/revoked").status(),
      StatusIs(StatusCode::kNotFound, "does not exist"));
}

TEST(RevocationTest, RevokedClientsAreRefusedAndTheListIsReadAgainWhenItChanges) {
  const std::string path = ::testing::TempDir() + "/revoked_" + std::to_string(::getpid());
  OneClientServer fed(AliceAndMallory(path, "# revoked clients\nmallory\n"));
  ClientTls as_alice, as_mallory;
  as_alice.token = "secret-a";
  as_mallory.token = "secret-m";
  auto alice = MakeGrpcFederationTransport(fed.target, as_alice);
  auto mallory = MakeGrpcFederationTransport(fed.target, as_mallory);
  EXPECT_THAT(mallory->Join("", 10, "test"), StatusIs(StatusCode::kPermissionDenied, "'mallory' is revoked"));
  ASSERT_OK(alice->Join("", 10, "test"));

  // Revoking alice while the server runs: her next call is refused.
  std::ofstream(path) << "mallory\nalice\n";
  std::filesystem::last_write_time(path, std::filesystem::last_write_time(path) + std::chrono::seconds(5));
  EXPECT_THAT(alice->Poll("alice", 10), StatusIs(StatusCode::kPermissionDenied, "'alice' is revoked"));
  EXPECT_EQ(fed.server->status().connected_clients, 0);  // the engine let go of her
  std::ofstream(path) << "two names\n";
  EXPECT_THAT(RevocationList::Open(path).status(), StatusIs(StatusCode::kInvalidArgument, "line 1"));
  std::filesystem::remove(path);
}

TEST(AdminTest, OnlyAdminsReadTheStatusWhenAnAdminListIsGiven) {
  DoorLimits limits;
  limits.tokens = std::make_shared<const TokenRegistry>(*TokenRegistry::Parse(
      TokenRegistry::EntryFor("alice", "secret-a") + "\n" + TokenRegistry::EntryFor("ops", "secret-o") + "\n"));
  limits.admins = {"ops"};
  OneClientServer fed(limits);
  EXPECT_TRUE(StatusAs(fed.target, "secret-o").ok());
  const grpc::Status alice = StatusAs(fed.target, "secret-a");
  EXPECT_EQ(alice.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(alice.error_message().find("'alice' is not one"), std::string::npos) << alice.error_message();
  EXPECT_EQ(StatusAs(fed.target, "").error_code(), grpc::StatusCode::UNAUTHENTICATED);

  // Without proven identities an admin list would be meaningless: refused at start.
  DoorLimits open;
  open.admins = {"ops"};
  MemoryStore store;
  RealClock clock;
  SyncOptions o;
  auto engine = *SyncEngine::Open(o, *ModelState::Create({{"w", {4}}}), &store, &clock, nullptr, nullptr);
  EXPECT_THAT(FederationServer::Start("127.0.0.1:0", engine.get(), &store, {"tiny", 1}, {}, open).status(),
              StatusIs(StatusCode::kInvalidArgument, "needs proven client identities"));
}

// A download as a client makes it, with a client token and a claimed id; counts the chunks read.
grpc::Status DownloadAs(const std::string& target, const std::string& token, const std::string& client_id,
                        int* chunks) {
  auto stub = v1::Federation::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  v1::DownloadModelRequest req;
  req.set_version(0);
  req.set_client_id(client_id);
  auto reader = stub->DownloadModel(&ctx, req);
  v1::ModelChunk chunk;
  *chunks = 0;
  while (reader->Read(&chunk)) ++*chunks;
  return reader->Finish();
}

// The model and the status (client and task ids) are the federation's: with tokens, a caller
// without a valid, unrevoked token gets neither.
TEST(DownloadAuthTest, DownloadsAndTheStatusNeedAValidUnrevokedIdentity) {
  const std::string path = ::testing::TempDir() + "/revoked_dl_" + std::to_string(::getpid());
  OneClientServer fed(AliceAndMallory(path, "mallory\n"));
  int chunks = 0;
  EXPECT_TRUE(DownloadAs(fed.target, "secret-a", "", &chunks).ok());
  EXPECT_GT(chunks, 0);
  EXPECT_EQ(DownloadAs(fed.target, "", "", &chunks).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(chunks, 0);
  EXPECT_EQ(DownloadAs(fed.target, "guess", "alice", &chunks).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(chunks, 0);
  EXPECT_EQ(DownloadAs(fed.target, "secret-m", "", &chunks).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(chunks, 0);
  EXPECT_EQ(DownloadAs(fed.target, "secret-m", "alice", &chunks).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(chunks, 0);
  // The client's own transport names itself and downloads.
  ClientTls as_alice;
  as_alice.token = "secret-a";
  auto alice = MakeGrpcFederationTransport(fed.target, as_alice);
  ASSERT_OK(alice->Join("", 10, "test"));
  std::string bytes;
  StringDownloadSink sink(&bytes);
  ASSERT_OK(alice->Download(0, &sink));
  EXPECT_EQ(bytes.size(), sink.total());

  // The status: a valid token is enough when there is no admin list; none or a wrong one is not.
  EXPECT_TRUE(StatusAs(fed.target, "secret-a").ok());
  EXPECT_EQ(StatusAs(fed.target, "").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(StatusAs(fed.target, "guess").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  std::filesystem::remove(path);
}

TEST(DownloadAuthTest, PublicStatusOpensTheStatusToEveryCaller) {
  DoorLimits limits;
  limits.tokens =
      std::make_shared<const TokenRegistry>(*TokenRegistry::Parse(TokenRegistry::EntryFor("alice", "secret-a") + "\n"));
  limits.public_status = true;
  OneClientServer fed(limits);
  EXPECT_TRUE(StatusAs(fed.target, "").ok());
}

// Without tokens or certificates the claimed id is all there is: a revoked name is refused.
TEST(DownloadAuthTest, PlaintextDownloadsByARevokedNameAreRefused) {
  const std::string path = ::testing::TempDir() + "/revoked_plain_" + std::to_string(::getpid());
  std::ofstream(path) << "mallory\n";
  DoorLimits limits;
  limits.revoked = *RevocationList::Open(path, /*recheck_ms=*/0);
  OneClientServer fed(limits);
  int chunks = 0;
  EXPECT_EQ(DownloadAs(fed.target, "", "mallory", &chunks).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(chunks, 0);
  EXPECT_TRUE(DownloadAs(fed.target, "", "alice", &chunks).ok());
  std::filesystem::remove(path);
}

// A federation of one client on a model whose updates take three 1 MiB chunks.
struct BigModelServer {
  explicit BigModelServer(const DoorLimits& limits = {}) {
    SyncOptions o;
    o.rounds = 1;
    o.clients_per_round = 1;
    o.min_clients = 1;
    engine = *SyncEngine::Open(o, model, &store, &clock, nullptr, nullptr);
    server = *FederationServer::Start("127.0.0.1:0", engine.get(), &store, {"big", 1}, {}, limits);
    target = "127.0.0.1:" + std::to_string(server->port());
    stub = v1::Federation::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  }
  ~BigModelServer() {
    transport.reset();
    server->Shutdown();
  }

  // Client "a" joins through `transport` (gRPC, made here) and gets the round's one task; a
  // failure is reported and leaves the task's id empty.
  Task JoinA() {
    transport = MakeGrpcFederationTransport(target);
    EXPECT_OK(transport->Join("a", 10, "test"));
    Result<PollAnswer> answer = transport->Poll("a", 1000);
    EXPECT_OK(answer.status());
    return answer.ok() ? answer->task : Task{};
  }

  int64_t UploadsResumed() {
    grpc::ClientContext ctx;
    v1::StatusReply r;
    EXPECT_TRUE(stub->GetStatus(&ctx, v1::StatusRequest(), &r).ok());
    return r.uploads_resumed();
  }
  // How many bytes of the upload the server holds, once it has noticed the broken stream.
  uint64_t HeldBytes(const Task& t, size_t total) {
    for (int i = 0; i < 200; ++i) {
      grpc::ClientContext ctx;
      v1::UploadStatusRequest req;
      req.set_client_id("a");
      req.set_task_id(t.task_id);
      req.set_total_bytes(total);
      v1::UploadStatusReply rep;
      EXPECT_TRUE(stub->UploadStatus(&ctx, req, &rep).ok());
      if (rep.received_bytes() > 0) return rep.received_bytes();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return 0;
  }
  // The first chunk of client a's upload for task t.
  static v1::UpdateChunk HeaderChunk(const Task& t, size_t total_bytes) {
    v1::UpdateChunk c;
    v1::UpdateHeader* h = c.mutable_header();
    h->set_client_id("a");
    h->set_task_id(t.task_id);
    h->set_base_version(t.model_version);
    h->set_num_examples(10);
    h->set_local_steps(1);
    h->set_encoding(v1::ENCODING_DELTA_SAFETENSORS_F32);
    h->set_total_bytes(total_bytes);
    return c;
  }
  // Starts an upload of `payload` and, after `chunks` chunks of 1 MiB, breaks the link (cancel:
  // the injected disconnect, once the server has the chunks) or ends the stream early. Either
  // way exactly those chunks arrive.
  void UploadAndDisconnect(const Task& t, const std::string& payload, int chunks, bool cancel = false) {
    grpc::ClientContext ctx;
    v1::UploadReply rep;
    const int64_t received_before = server->metrics().received_upload_bytes;
    auto w = stub->UploadUpdate(&ctx, &rep);
    ASSERT_TRUE(w->Write(HeaderChunk(t, payload.size())));
    for (int i = 0; i < chunks; ++i) {
      v1::UpdateChunk d;
      d.set_data(payload.substr(static_cast<size_t>(i) << 20, size_t{1} << 20));
      ASSERT_TRUE(w->Write(d));
    }
    if (cancel) {
      // Cancel once the server's handler has the chunks (it counts them as they arrive).
      const int64_t sent = static_cast<int64_t>(chunks) << 20;
      for (int i = 0; i < 2000 && server->metrics().received_upload_bytes - received_before < sent; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      ASSERT_EQ(server->metrics().received_upload_bytes - received_before, sent);
      ctx.TryCancel();
    } else {
      w->WritesDone();
    }
    (void)w->Finish();
  }

  RealClock clock;
  MemoryStore store;
  const ModelState model = *ModelState::Create({{"w", {600000}}});  // 2.4 MB: three chunks
  std::unique_ptr<SyncEngine> engine;
  std::unique_ptr<FederationServer> server;
  std::string target;
  std::unique_ptr<v1::Federation::Stub> stub;
  std::unique_ptr<FederationTransport> transport;  // JoinA's
};

TEST(UploadResumeTest, AnInterruptedUploadResumesWhereItStopped) {
  BigModelServer fed;
  const Task t = fed.JoinA();
  ASSERT_FALSE(t.task_id.empty());
  auto& transport = fed.transport;
  const ModelState delta = PatternDelta(fed.model, 7, 0.25f);
  const std::string payload = EncodeSafetensors(delta);

  fed.UploadAndDisconnect(t, payload, 2, /*cancel=*/true);
  const uint64_t held = fed.HeldBytes(t, payload.size());
  ASSERT_GT(held, 0u);
  ASSERT_EQ(held, size_t{2} << 20);
  UploadHeader h;
  h.client_id = "a";
  h.task_id = t.task_id;
  h.base_version = t.model_version;
  h.num_examples = 10;
  h.local_steps = 1;
  h.resume = true;  // as the client runtime marks a retry
  // Sent as the client runtime sends it: the prefix, then the values from the delta's own memory
  // (the resumed part lies in those; the payload's SHA-256 is over both).
  ASSERT_OK(transport->Upload(h, Payload::SafetensorsOf(ModelState(delta))));
  EXPECT_EQ(fed.UploadsResumed(), 1);
  const ServerMetrics m = fed.server->metrics();
  EXPECT_EQ(m.upload_bytes_resumed, int64_t{2} << 20);                       // the part held was not sent again
  EXPECT_EQ(m.received_upload_bytes, static_cast<int64_t>(payload.size()));  // every byte arrived once
  ASSERT_TRUE(fed.server->status().finished);
  EXPECT_EQ(fed.engine->model().data()[6], 1.5f);  // base 0 + the one delta, assembled right
  EXPECT_EQ(fed.engine->model().data()[599999], static_cast<float>(599999 % 7) * 0.25f);
}

// A float32 download is served from the published model's own values (and an older version's
// from its checkpoint read back): whole, and resumed from within the prefix and from within the
// values, off the chunks' boundaries, every byte is the model's safetensors encoding.
TEST(DownloadServingTest, AVersionDownloadsWholeAndResumedFromAnyByte) {
  BigModelServer fed;
  const Task t = fed.JoinA();
  ASSERT_FALSE(t.task_id.empty());
  auto& transport = fed.transport;
  const ModelState delta = PatternDelta(fed.model, 13, 0.25f);
  ASSERT_OK(transport->Upload(HeaderFor("a", t), EncodeSafetensors(delta)));
  ASSERT_EQ(fed.engine->model().version(), 1u);
  ModelState older = fed.model;
  older.set_version(0);
  const std::string expected[2] = {EncodeSafetensors(older), EncodeSafetensors(fed.engine->model())};
  for (uint64_t version : {1u, 0u}) {
    const std::string& whole = expected[version];
    for (size_t from : {size_t{0}, size_t{5}, (size_t{1} << 20) + 3}) {
      std::string bytes = whole.substr(0, from);
      StringDownloadSink sink(&bytes);
      ASSERT_OK(transport->Download(version, &sink)) << "version " << version << " from byte " << from;
      EXPECT_EQ(sink.total(), whole.size());
      EXPECT_TRUE(bytes == whole) << "version " << version << " from byte " << from;
    }
  }
}

// A store that lends the memory uploads are decoded into (as SqliteStore lends its update files
// on tmpfs) and says whether the update it stores lies there.
class LendingStore final : public StoreWrapper {
 public:
  explicit LendingStore(Store* target) : StoreWrapper(target) {}
  std::shared_ptr<LargeBlockSource> UpdateMemory() override { return memory; }
  Status PutAcceptedUpdate(uint64_t round, int64_t attempt, const Update& u) override {
    stored_in_lent_memory = memory->lent(u.delta.data().data());
    return StoreWrapper::PutAcceptedUpdate(round, attempt, u);
  }
  const std::shared_ptr<testing::HeapBlockLender> memory = std::make_shared<testing::HeapBlockLender>();
  bool stored_in_lent_memory = false;
};

TEST(UploadMemoryTest, UploadsAreDecodedWhereTheStoreLendsAndStoredFromThere) {
  MemoryStore memory_store;
  LendingStore store(&memory_store);
  RealClock clock;
  const ModelState model = *ModelState::Create({{"w", {600000}}});  // 2.4 MB: a large block
  SyncOptions o;
  o.rounds = 1;
  o.clients_per_round = 1;
  o.min_clients = 1;
  auto engine = *SyncEngine::Open(o, model, &store, &clock, nullptr, nullptr);
  auto server = *FederationServer::Start("127.0.0.1:0", engine.get(), &store, {"big", 1}, {}, DoorLimits{});
  auto transport = MakeGrpcFederationTransport("127.0.0.1:" + std::to_string(server->port()));
  ASSERT_OK(transport->Join("a", 10, "test"));
  const Task t = transport->Poll("a", 1000)->task;
  const ModelState delta = PatternDelta(model, 5, 0.5f);
  ASSERT_OK(transport->Upload(HeaderFor("a", t), EncodeSafetensors(delta)));
  EXPECT_TRUE(store.stored_in_lent_memory);
  ASSERT_TRUE(server->status().finished);
  EXPECT_EQ(engine->model().data()[4], 2.0f);
  server->Shutdown();
  engine.reset();
  EXPECT_EQ(store.memory->given_back(), 1);  // the update's block went back once it was merged
}

TEST(FlowControlTest, WithFixedWindowsAMultiChunkUploadArrivesWhole) {
  DoorLimits limits;
  limits.adaptive_flow_control = false;
  BigModelServer fed(limits);
  const Task t = fed.JoinA();
  ASSERT_FALSE(t.task_id.empty());
  auto& transport = fed.transport;
  const ModelState delta = PatternDelta(fed.model, 5, 0.5f);
  // 2.4 MB, 64 KB at a time; the first chunk is the prefix and the start of the delta's own values.
  ASSERT_OK(transport->Upload(HeaderFor("a", t), Payload::SafetensorsOf(ModelState(delta))));
  ASSERT_TRUE(fed.server->status().finished);
  EXPECT_EQ(fed.engine->model().ContentSha256(), [&] {
    ModelState expected = fed.model;
    for (size_t i = 0; i < expected.num_params(); ++i) expected.data()[i] += delta.data()[i];
    return expected.ContentSha256();
  }());
}

TEST(UploadResumeTest, ResumesThatDoNotMatchAreRefusedAndTheClientStartsOver) {
  BigModelServer fed;
  const Task t = fed.JoinA();
  ASSERT_FALSE(t.task_id.empty());
  auto& transport = fed.transport;
  ModelState delta = ModelState::ZerosLike(fed.model);
  const std::string payload = EncodeSafetensors(delta);

  // A resume with nothing held, and one whose bytes do not hash to what it claims.
  auto resume = [&](uint64_t offset, const std::string& sha) {
    grpc::ClientContext ctx;
    v1::UploadReply rep;
    auto w = fed.stub->UploadUpdate(&ctx, &rep);
    v1::UpdateChunk c = BigModelServer::HeaderChunk(t, payload.size());
    v1::UpdateHeader* h = c.mutable_header();
    h->set_offset(offset);
    h->set_payload_sha256(sha);
    w->Write(c);
    v1::UpdateChunk d;
    d.set_data(payload.substr(offset));
    w->Write(d);
    w->WritesDone();
    return w->Finish();
  };
  grpc::Status none = resume(1 << 20, Sha256Hex(payload));
  EXPECT_EQ(none.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(none.error_message().find("upload from byte 0"), std::string::npos) << none.error_message();
  fed.UploadAndDisconnect(t, payload, 1);
  ASSERT_EQ(fed.HeldBytes(t, payload.size()), size_t{1} << 20);
  grpc::Status forged = resume(1 << 20, std::string(64, '0'));
  EXPECT_EQ(forged.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_EQ(fed.UploadsResumed(), 0);

  // The client runtime's transport: the held bytes are gone, so it uploads everything.
  ModelState other = delta;
  for (float& x : other.data()) x = 1.0f;
  fed.UploadAndDisconnect(t, EncodeSafetensors(other), 1);  // a different payload's first chunk
  ASSERT_EQ(fed.HeldBytes(t, payload.size()), size_t{1} << 20);
  UploadHeader h;
  h.client_id = "a";
  h.task_id = t.task_id;
  h.num_examples = 10;
  h.local_steps = 1;
  h.resume = true;
  ASSERT_OK(transport->Upload(h, payload));  // resume refused (hash), then from byte 0
  EXPECT_TRUE(fed.server->status().finished);
}

TEST(TokenRegistryTest, ParseRefusesMalformedAndDuplicateLines) {
  EXPECT_EQ(TokenRegistry::Parse("")->size(), 0u);
  EXPECT_THAT(TokenRegistry::Parse("alice\n").status(), StatusIs(StatusCode::kInvalidArgument, "line 1"));
  EXPECT_THAT(TokenRegistry::Parse("\nalice ABC\n").status(), StatusIs(StatusCode::kInvalidArgument, "line 2"));
  const std::string a = TokenRegistry::EntryFor("alice", "t1");
  EXPECT_THAT(TokenRegistry::Parse(a + "\n" + TokenRegistry::EntryFor("alice", "t2")).status(),
              StatusIs(StatusCode::kInvalidArgument, "listed twice"));
  EXPECT_EQ(*TokenRegistry::Parse(a)->ClientFor("t1"), "alice");
  EXPECT_FALSE(TokenRegistry::Parse(a)->ClientFor("t2").has_value());
  EXPECT_EQ(a.find("t1"), std::string::npos);  // only the hash is stored
}

// A store whose commits wait until the test opens the gate.
class GatedStore : public StoreWrapper {
 public:
  using StoreWrapper::StoreWrapper;
  Status CommitRound(const RoundRecord& r, const ModelState& m, std::string_view state) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++waiting_;
    cv_.notify_all();
    cv_.wait(lock, [this] { return open_; });
    return StoreWrapper::CommitRound(r, m, state);
  }
  void WaitForACommit() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return waiting_ > 0; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int waiting_ = 0;
  bool open_ = false;
};

TEST(CommitOutsideTest, UploadsAreAcknowledgedWhileAVersionCommitsAndShutdownCommitsWhatIsQueued) {
  MemoryStore memory;
  GatedStore store(&memory);
  RealClock clock;
  const ModelState model = *ModelState::Create({{"w", {4}}});
  AsyncOptions o;
  o.rounds = 5;
  o.buffer_size = 1;
  o.commit_outside = true;
  auto engine = *AsyncEngine::Open(o, model, &store, &clock, nullptr, nullptr);
  auto server = *FederationServer::Start("127.0.0.1:0", engine.get(), &store, {"tiny", 5});
  auto transport = MakeGrpcFederationTransport("127.0.0.1:" + std::to_string(server->port()));
  ASSERT_OK(transport->Join("a", 10, "test"));
  ASSERT_OK(transport->Join("b", 10, "test"));
  const Task ta = transport->Poll("a", 1000)->task, tb = transport->Poll("b", 1000)->task;
  const ModelState delta = FilledLike(model, 1.0f);
  ASSERT_OK(transport->Upload(HeaderFor("a", ta), EncodeSafetensors(delta)));
  store.WaitForACommit();  // version 1 is being committed and cannot finish
  // b's update is acknowledged meanwhile (folded into version 2), and tasks stay on version 0.
  ASSERT_OK(transport->Upload(HeaderFor("b", tb), EncodeSafetensors(delta)));
  EXPECT_EQ(transport->Poll("a", 10)->task.model_version, 0u);
  EXPECT_EQ(server->status().model_version, 0u);

  std::atomic<bool> stopped{false};
  std::thread shutdown([&] {
    server->Shutdown();
    stopped = true;
  });
  // Shutdown has begun once the server refuses calls; it must then wait for the blocked commit.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (transport->Poll("a", 10).ok() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_FALSE(transport->Poll("a", 10).ok()) << "the server kept answering after Shutdown began";
  EXPECT_FALSE(stopped) << "Shutdown returned while a version's commit was still blocked";
  store.Open();
  shutdown.join();
  EXPECT_TRUE(stopped);
  // Both versions were committed before the server stopped, and each checkpoint is the model.
  ASSERT_EQ(memory.ListRounds()->size(), 2u);
  EXPECT_EQ(engine->model().version(), 2u);
  EXPECT_EQ(memory.Checkpoint(2)->ContentSha256(), engine->model().ContentSha256());
  EXPECT_EQ(memory.ListRounds()->back().model_sha256, engine->model().ContentSha256());
}

TEST_F(FederationServerTest, AnUploadCarriesBackWhatAPollWouldAnswerAtOnce) {
  UploadHeader a = Header("a", task_a_);
  a.want_next_task = true;
  Result<UploadAck> ack = transport_->Upload(a, Delta(1.0f));
  ASSERT_OK(ack);
  EXPECT_FALSE(ack->next.has_value());  // the round still waits for b: a polls as before
  UploadHeader b = Header("b", task_b_);
  b.want_next_task = true;
  ack = transport_->Upload(b, Delta(3.0f));
  ASSERT_OK(ack);
  ASSERT_TRUE(ack->next.has_value());
  EXPECT_EQ(ack->next->kind, PollAnswer::Kind::kFinished);  // b's update closed the last round
}

TEST(NextTaskTest, AsyncClientsGetTheirNextTaskWithEachUpload) {
  MemoryStore store;
  RealClock clock;
  const ModelState model = *ModelState::Create({{"w", {4}}});
  AsyncOptions o;
  o.rounds = 2;
  o.buffer_size = 1;
  auto engine = *AsyncEngine::Open(o, model, &store, &clock, nullptr, nullptr);
  auto server = *FederationServer::Start("127.0.0.1:0", engine.get(), &store, {"tiny", 5});
  auto transport = MakeGrpcFederationTransport("127.0.0.1:" + std::to_string(server->port()));
  ASSERT_OK(transport->Join("a", 10, "test"));
  const Task first = transport->Poll("a", 1000)->task;
  ModelState delta = ModelState::ZerosLike(model);
  UploadHeader h = HeaderFor("a", first);
  h.want_next_task = true;
  Result<UploadAck> ack = transport->Upload(h, EncodeSafetensors(delta));
  ASSERT_OK(ack);
  ASSERT_TRUE(ack->next.has_value());
  ASSERT_EQ(ack->next->kind, PollAnswer::Kind::kTask);
  const Task second = ack->next->task;
  EXPECT_EQ(second.model_version, 1u);
  EXPECT_EQ(second.model_sha256, engine->model().ContentSha256());
  EXPECT_EQ(second.model_crc32c, engine->model().ContentCrc32c());
  EXPECT_NE(second.task_id, first.task_id);
  h = HeaderFor("a", second);
  h.want_next_task = true;
  ack = transport->Upload(h, EncodeSafetensors(delta));  // the task works like a polled one
  ASSERT_OK(ack);
  ASSERT_TRUE(ack->next.has_value());
  EXPECT_EQ(ack->next->kind, PollAnswer::Kind::kFinished);
  EXPECT_TRUE(server->AllClientsToldFinished());
  server->Shutdown();
}

// In async mode versions move on while a client trains: weights sent for a task one version
// behind are a delta against that task's base, not against the current model.
TEST(WeightsUploadTest, WeightsBecomeADeltaAgainstTheTasksBaseVersion) {
  MemoryStore store;
  RealClock clock;
  const ModelState model = *ModelState::Create({{"w", {4}}});  // zeros
  AsyncOptions o;
  o.rounds = 3;
  o.buffer_size = 1;
  o.staleness = "constant";
  auto engine = *AsyncEngine::Open(o, model, &store, &clock, nullptr, nullptr);
  auto server = *FederationServer::Start("127.0.0.1:0", engine.get(), &store, {"tiny", 3});
  const std::string target = "127.0.0.1:" + std::to_string(server->port());
  auto transport = MakeGrpcFederationTransport(target);
  ASSERT_OK(transport->Join("a", 10, "test"));
  ASSERT_OK(transport->Join("b", 10, "test"));
  const Task ta = transport->Poll("a", 1000)->task;
  const Task tb = transport->Poll("b", 1000)->task;
  const ModelState plus_one = FilledLike(model, 1.0f);
  ASSERT_OK(transport->Upload(HeaderFor("b", tb), EncodeSafetensors(plus_one)));  // version 1: all ones
  ASSERT_EQ(engine->model().version(), 1u);
  // a trained from version 0 (zeros) to weights of 2: its delta is +2.
  const ModelState weights = FilledLike(model, 2.0f);
  auto stub = v1::Federation::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::UploadReply rep;
  auto w = stub->UploadUpdate(&ctx, &rep);
  const std::string bytes = EncodeSafetensors(weights);
  v1::UpdateChunk head;
  v1::UpdateHeader* h = head.mutable_header();
  h->set_client_id("a");
  h->set_task_id(ta.task_id);
  h->set_base_version(ta.model_version);
  h->set_num_examples(10);
  h->set_encoding(v1::ENCODING_WEIGHTS_SAFETENSORS_F32);
  h->set_total_bytes(bytes.size());
  ASSERT_TRUE(w->Write(head));
  v1::UpdateChunk data;
  data.set_data(bytes);
  ASSERT_TRUE(w->Write(data));
  w->WritesDone();
  const grpc::Status s = w->Finish();
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(engine->model().version(), 2u);
  EXPECT_FLOAT_EQ(engine->model().data()[0], 3.0f);  // 1 + 2; against the current model it was 1 + 1
  server->Shutdown();
}

// With the default settings, two uploads of 3e38 values once made every later version infinite.
// The default adaptive bound refuses them at the door (the model's norm sets the scale before
// any update is accepted), and honest updates still pass.
TEST(AdaptiveNormTest, HugeUpdatesAreRefusedByDefaultAndHonestOnesPass) {
  MemoryStore store;
  RealClock clock;
  ModelState model = *ModelState::Create({{"w", {4}}});
  for (float& x : model.data()) x = 1.0f;  // norm 2
  SyncOptions o;
  o.rounds = 1;
  o.clients_per_round = 2;
  o.min_clients = 2;
  auto engine = *SyncEngine::Open(o, model, &store, &clock, nullptr, nullptr);
  auto server = *FederationServer::Start("127.0.0.1:0", engine.get(), &store, {"tiny", 1});
  auto transport = MakeGrpcFederationTransport("127.0.0.1:" + std::to_string(server->port()));
  ASSERT_OK(transport->Join("a", 10, "test"));
  ASSERT_OK(transport->Join("b", 10, "test"));
  const Task ta = transport->Poll("a", 1000)->task;
  const Task tb = transport->Poll("b", 1000)->task;
  const ModelState huge = FilledLike(model, 3e38f);
  EXPECT_THAT(transport->Upload(HeaderFor("a", ta), EncodeSafetensors(huge)),
              StatusIs(StatusCode::kInvalidArgument, "--adaptive-norm-factor"));
  const ModelState honest = FilledLike(model, 0.1f);
  ASSERT_OK(transport->Upload(HeaderFor("a", ta), EncodeSafetensors(honest)));
  ASSERT_OK(transport->Upload(HeaderFor("b", tb), EncodeSafetensors(honest)));
  EXPECT_EQ(engine->model().version(), 1u);
  EXPECT_TRUE(AllFinite(engine->model().data()));
  server->Shutdown();
}

// A BatchNorm model on unnormalized data: its running statistics change by far more than the
// weights, and the adaptive bound counting them refused every honest update. Buffers are left
// out of the norm and checked for range on their own, in float32 and in int8 uploads.
TEST(AdaptiveNormTest, BuffersAreLeftOutOfTheNormAndCheckedForRange) {
  MemoryStore store;
  RealClock clock;
  ModelState model = *ModelState::Create({{"w", {4}}, {"running_var", {2}}});
  for (float& x : model.data()) x = 1.0f;
  SyncOptions o;
  o.rounds = 1;
  o.clients_per_round = 2;
  o.min_clients = 2;
  auto engine = *SyncEngine::Open(o, model, &store, &clock, nullptr, nullptr);
  ServerInfo info{"tiny", 1, "int8:chunk=4"};
  info.buffer_tensors = {"running_var"};
  auto server = *FederationServer::Start("127.0.0.1:0", engine.get(), &store, info);
  auto transport = MakeGrpcFederationTransport("127.0.0.1:" + std::to_string(server->port()));
  ASSERT_OK(transport->Join("a", 10, "test"));
  ASSERT_OK(transport->Join("b", 10, "test"));
  const Task ta = transport->Poll("a", 1000)->task;
  const Task tb = transport->Poll("b", 1000)->task;
  ASSERT_EQ(ta.upload_codec, "int8:chunk=4");  // the client's transport advertises every codec
  ModelState delta = FilledLike(model, 0.1f);  // the weights move a little (norm 0.2)
  delta.data()[4] = delta.data()[5] = 5e4f;    // the variance of unnormalized features, a lot
  ModelState absurd = delta;
  absurd.data()[5] = 1e20f;
  const std::string int8_absurd = (*MakeCodec("int8:chunk=4"))->Encode(absurd, nullptr, 0);
  UploadHeader ha = HeaderFor("a", ta);
  ha.codec = "int8:chunk=4";
  EXPECT_THAT(transport->Upload(ha, int8_absurd), StatusIs(StatusCode::kInvalidArgument, "buffer running_var"));
  ASSERT_OK(transport->Upload(ha, (*MakeCodec("int8:chunk=4"))->Encode(delta, nullptr, 0)));
  EXPECT_THAT(transport->Upload(HeaderFor("b", tb), EncodeSafetensors(absurd)),
              StatusIs(StatusCode::kInvalidArgument, "buffer running_var at index 1"));
  ASSERT_OK(transport->Upload(HeaderFor("b", tb), EncodeSafetensors(delta)));
  EXPECT_EQ(engine->model().version(), 1u);
  server->Shutdown();
}

// Kubernetes probes and load balancers speak grpc.health.v1: the server answers SERVING. Called
// as raw bytes: an empty HealthCheckRequest, and the reply's field 1 (status) = 1 (SERVING).
TEST_F(FederationServerTest, TheStandardHealthServiceAnswersServing) {
  auto channel = grpc::CreateChannel(target_, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Slice no_bytes(std::string{});  // HealthCheckRequest{service: ""} encodes to no bytes
  grpc::ByteBuffer request(&no_bytes, 1);
  grpc::ByteBuffer reply;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &reply, [&](grpc::Status s) {
    std::lock_guard<std::mutex> lock(mu);
    status = s;
    done = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(reply.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& slice : slices) bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));
}

TEST_F(FederationServerTest, ListeningTwiceOnOnePortFails) {
  auto second = FederationServer::Start(target_, engine_.get(), &store_, {"tiny", 1});
  EXPECT_THAT(second, StatusIs(StatusCode::kUnavailable, "is already in use"));
  EXPECT_THAT(second, StatusIs(StatusCode::kUnavailable, "--listen"));
}

// A sync federation of `rounds` one-client rounds whose every version the clients evaluate
// (all of them: fraction 1), on a store that outlives its servers.
struct EvaluatedFederation {
  explicit EvaluatedFederation(int64_t rounds) : info{"tiny", rounds} {
    options.rounds = rounds;
    options.clients_per_round = 1;
    options.min_clients = 1;
    info.federated_eval.every = 1;
    info.federated_eval.fraction = 1.0;
  }
  ~EvaluatedFederation() { Stop(); }

  // Starts the engine and the server from the store, as a (re)started process would.
  void Start() {
    engine = *SyncEngine::Open(options, model, &store, &clock, nullptr, nullptr);
    server = *FederationServer::Start("127.0.0.1:0", engine.get(), &store, info);
    transport = MakeGrpcFederationTransport("127.0.0.1:" + std::to_string(server->port()));
  }
  void Stop() {
    if (server) server->Shutdown();
    server.reset();
  }
  // Client "a" (10 examples) joins, trains version 1, and polls again: the evaluation task.
  Result<PollAnswer> TrainVersionOneAndPoll() {
    PLEXUS_RETURN_IF_ERROR(transport->Join("a", 10, "test").status());
    PLEXUS_ASSIGN_OR_RETURN(PollAnswer train, transport->Poll("a", 1000));
    PLEXUS_RETURN_IF_ERROR(
        transport->Upload(HeaderFor("a", train.task), EncodeSafetensors(FilledLike(model, 0.5f))).status());
    return transport->Poll("a", 1000);
  }

  RealClock clock;
  MemoryStore store;
  const ModelState model = *ModelState::Create({{"w", {4}}});
  SyncOptions options;
  ServerInfo info;
  std::unique_ptr<SyncEngine> engine;
  std::unique_ptr<FederationServer> server;
  std::unique_ptr<FederationTransport> transport;
};

// A client that joined with 10 examples reported 2^40 evaluation examples, and the version's
// federated accuracy became its own. Reports are bounded by what the client declared at join.
TEST(FederatedEvaluationDoorTest, AReportCountingMoreExamplesThanTheClientCanHoldIsRefused) {
  EvaluatedFederation fed(1);
  fed.Start();
  Result<PollAnswer> eval = fed.TrainVersionOneAndPoll();
  ASSERT_OK(eval.status());
  ASSERT_EQ(eval->kind, PollAnswer::Kind::kTask);
  ASSERT_TRUE(eval->task.evaluate_only);
  EXPECT_THAT(fed.transport->ReportEvaluation("a", eval->task.task_id, Evaluation{1e-9, 0.1, int64_t{1} << 40}),
              StatusIs(StatusCode::kInvalidArgument, "declared 10 training examples"));
  // --federated-eval-split 0.9 of 100 examples: 10 trained on, 90 held out.
  ASSERT_OK(fed.transport->ReportEvaluation("a", eval->task.task_id, Evaluation{0.75, 0.5, 90}));
  const std::map<uint64_t, RoundRecord> results = fed.server->FederatedEvaluations();
  ASSERT_EQ(results.count(1), 1u);
  ASSERT_TRUE(results.at(1).federated_accuracy.has_value());
  EXPECT_DOUBLE_EQ(*results.at(1).federated_accuracy, 0.75);
}

// An evaluation task of the server's newest version names its CRC-32C, as a training task does,
// so that the client checks its download with it rather than hashing the model; one of an older
// version (whose checksum the server no longer holds) names the SHA-256 alone.
TEST(FederatedEvaluationDoorTest, AnEvaluationTaskOfTheNewestVersionNamesItsChecksum) {
  EvaluatedFederation fed(2);
  fed.Start();
  ASSERT_OK(fed.transport->Join("a", 10, "test").status());
  Result<PollAnswer> train = fed.transport->Poll("a", 1000);
  ASSERT_OK(train.status());
  ASSERT_EQ(train->kind, PollAnswer::Kind::kTask);
  ASSERT_OK(fed.transport->Join("b", 10, "test").status());  // known when version 1 is published
  ASSERT_OK(fed.transport->Upload(HeaderFor("a", train->task), EncodeSafetensors(FilledLike(fed.model, 0.5f))));
  const ModelState version_one = *fed.engine->model_snapshot();
  ASSERT_EQ(version_one.version(), 1u);
  Result<PollAnswer> newest = fed.transport->Poll("a", 1000);
  ASSERT_OK(newest.status());
  ASSERT_TRUE(newest->task.evaluate_only);
  ASSERT_EQ(newest->task.model_version, 1u);
  EXPECT_EQ(newest->task.model_crc32c, version_one.ContentCrc32c());
  EXPECT_EQ(newest->task.model_sha256, version_one.ContentSha256());

  // Round 2, asked of the engine itself so that "b" keeps its evaluation of version 1 for later.
  std::string trainer;
  Task round_two;
  ASSERT_OK(fed.server->WithEngine([&](Engine& e) -> Status {
    for (const char* id : {"a", "b"}) {
      PLEXUS_ASSIGN_OR_RETURN(PollAnswer p, e.Poll(id));
      if (p.kind == PollAnswer::Kind::kTask) trainer = id, round_two = p.task;
    }
    return Status::Ok();
  }));
  ASSERT_FALSE(trainer.empty());
  ASSERT_OK(fed.transport->Upload(HeaderFor(trainer, round_two), EncodeSafetensors(FilledLike(fed.model, 0.25f))));
  ASSERT_EQ(fed.engine->model_snapshot()->version(), 2u);

  Result<PollAnswer> second = fed.transport->Poll("b", 1000);  // the newest campaign first
  ASSERT_OK(second.status());
  ASSERT_TRUE(second->task.evaluate_only);
  ASSERT_EQ(second->task.model_version, 2u);
  EXPECT_EQ(second->task.model_crc32c, fed.engine->model_snapshot()->ContentCrc32c());
  Result<PollAnswer> older = fed.transport->Poll("b", 1000);
  ASSERT_OK(older.status());
  ASSERT_TRUE(older->task.evaluate_only);
  ASSERT_EQ(older->task.model_version, 1u);
  EXPECT_FALSE(older->task.model_crc32c.has_value());
  EXPECT_EQ(older->task.model_sha256, version_one.ContentSha256());
}

// A version's federated evaluation open when the server stopped was lost: the restarted server
// only evaluated versions published after it started. Now the last version, due and without a
// stored result, is evaluated again.
TEST(FederatedEvaluationDoorTest, AnEvaluationOpenWhenTheServerStoppedIsResumed) {
  EvaluatedFederation fed(2);
  fed.Start();
  Result<PollAnswer> lost = fed.TrainVersionOneAndPoll();  // handed out, never answered: the server stops
  ASSERT_OK(lost.status());
  ASSERT_TRUE(lost->task.evaluate_only);
  fed.Stop();
  fed.Start();
  Result<PollAnswer> eval = fed.transport->Poll("a", 1000);
  ASSERT_OK(eval.status());
  ASSERT_EQ(eval->kind, PollAnswer::Kind::kTask);
  EXPECT_TRUE(eval->task.evaluate_only);
  EXPECT_EQ(eval->task.model_version, 1u);
  EXPECT_EQ(eval->task.model_crc32c, fed.engine->model_snapshot()->ContentCrc32c());  // restored with the version
  ASSERT_OK(fed.transport->ReportEvaluation("a", eval->task.task_id, Evaluation{0.5, 1.0, 20}));
  ASSERT_EQ(fed.server->FederatedEvaluations().count(1), 1u);
  EXPECT_TRUE(fed.store.ListRounds()->at(0).federated_accuracy.has_value());
}

}  // namespace
}  // namespace plexus
