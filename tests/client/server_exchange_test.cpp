// ServerExchange against a real AsyncEngine (buffer K, server learning rate 1) behind an
// in-process transport: the sampled peers of a server round, on their own threads, each get the
// mean of their models back.
#include "client/server_exchange.h"

#include <gtest/gtest.h>

#include <mutex>
#include <thread>

#include "core/clock.h"
#include "core/safetensors.h"
#include "server/coordinator/async_engine.h"
#include "server/store/memory_store.h"

namespace plexus {
namespace {

// The engine's calls under one lock, as the server's door makes them.
class EngineTransport final : public FederationTransport {
 public:
  EngineTransport(AsyncEngine* engine, Store* store, std::mutex* mu, int* uploads)
      : engine_(engine), store_(store), mu_(mu), uploads_(uploads) {}
  Result<JoinReply> Join(const std::string& id, int64_t n, const std::string& device) override {
    std::lock_guard<std::mutex> lock(*mu_);
    PLEXUS_ASSIGN_OR_RETURN(std::string got, engine_->Join({id, n, device}));
    return JoinReply{got, "tiny"};
  }
  Result<PollAnswer> Poll(const std::string& id, int64_t) override {
    std::lock_guard<std::mutex> lock(*mu_);
    return engine_->Poll(id);
  }
  Status Download(uint64_t version, DownloadSink* sink) override {
    std::lock_guard<std::mutex> lock(*mu_);
    PLEXUS_ASSIGN_OR_RETURN(ModelState m, store_->Checkpoint(version));
    const std::string bytes = EncodeSafetensors(m);
    return sink->Append(std::string_view(bytes).substr(sink->received()), bytes.size());
  }
  Result<UploadAck> Upload(const UploadHeader& h, std::shared_ptr<const Payload> sent) override {
    const std::string payload = sent->ToString();
    std::lock_guard<std::mutex> lock(*mu_);
    PLEXUS_ASSIGN_OR_RETURN(ModelState delta, DecodeSafetensors(payload));
    PLEXUS_RETURN_IF_ERROR(engine_->Submit(
        Update{h.client_id, h.task_id, h.base_version, h.num_examples, h.local_steps, h.metrics, std::move(delta)}));
    ++*uploads_;
    return UploadAck{engine_->model().version(), std::nullopt};
  }

 private:
  AsyncEngine* engine_;
  Store* store_;
  std::mutex* mu_;
  int* uploads_;
};

ModelState Filled(float v, size_t n = 3) {
  ModelState m = *ModelState::Create({{"w", {static_cast<int64_t>(n)}}});
  for (float& x : m.data()) x = v;
  return m;
}

class ServerExchangeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    AsyncOptions o;
    o.rounds = 5;
    o.buffer_size = 3;
    o.server_lr = 1.0;
    engine_ = *AsyncEngine::Open(o, Filled(10), &store_, &clock_, nullptr, nullptr);
  }
  std::unique_ptr<ServerExchange> Peer(int i, double wait_ms = 60000) {
    return std::make_unique<ServerExchange>(std::make_unique<EngineTransport>(engine_.get(), &store_, &mu_, &uploads_),
                                            "peer-" + std::to_string(i), wait_ms);
  }

  ManualClock clock_;
  MemoryStore store_;
  std::unique_ptr<AsyncEngine> engine_;
  std::mutex mu_;
  int uploads_ = 0;
};

TEST_F(ServerExchangeTest, EverySampledPeerGetsTheMeanOfTheSampledModels) {
  const std::vector<float> own = {1, 2, 6};
  std::vector<Result<ModelState>> got(3, InvalidArgumentError("not run"));
  std::vector<std::thread> threads;
  std::vector<std::unique_ptr<ServerExchange>> peers;
  for (int i = 0; i < 3; ++i) peers.push_back(Peer(i));
  for (int i = 0; i < 3; ++i) threads.emplace_back([&, i] { got[i] = peers[i]->Exchange(Filled(own[i])); });
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(got[i].ok()) << got[i].status().ToString();
    EXPECT_EQ(got[i]->version(), 1u);
    for (float x : got[i]->data()) EXPECT_NEAR(x, 3.0f, 1e-5);  // (1 + 2 + 6) / 3, whatever the server held
  }
  EXPECT_EQ(uploads_, 3);
}

TEST_F(ServerExchangeTest, APeerWithAnotherModelIsToldAndUploadsNothing) {
  Result<ModelState> got = Peer(0)->Exchange(Filled(1, 4));
  EXPECT_EQ(got.status().code(), StatusCode::kFailedPrecondition) << got.status().ToString();
  EXPECT_NE(got.status().message().find("--model"), std::string::npos);
  EXPECT_EQ(uploads_, 0);
}

TEST_F(ServerExchangeTest, WithoutTheOtherSampledPeersTheWaitRunsOut) {
  Result<ModelState> got = Peer(0, 300)->Exchange(Filled(1));
  EXPECT_EQ(got.status().code(), StatusCode::kDeadlineExceeded) << got.status().ToString();
  EXPECT_EQ(uploads_, 1);  // its update is in the server's buffer
}

TEST_F(ServerExchangeTest, CancelEndsAWaitAtOnce) {
  std::unique_ptr<ServerExchange> peer = Peer(0);
  Result<ModelState> got = InvalidArgumentError("not run");
  std::thread waiting([&] { got = peer->Exchange(Filled(1)); });
  while (true) {  // until its update is in: it then waits for a version that will not come
    std::lock_guard<std::mutex> lock(mu_);
    if (uploads_ == 1) break;
  }
  peer->Cancel();
  waiting.join();
  EXPECT_EQ(got.status().code(), StatusCode::kCancelled) << got.status().ToString();
}

}  // namespace
}  // namespace plexus
