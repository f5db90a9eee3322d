// The adaptive norm bound in a real federation (gRPC on 127.0.0.1, a sync engine): of six
// clients, two send tiny legal updates (as a client with little data would) many times, one
// sends huge ones, three are honest. Before the bound counted clients, the tiny ones dragged it
// below every honest update and the federation wedged at round 2; now every honest update is
// accepted in every round, the huge ones are refused, the model stays finite and the federation
// finishes.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

#include "client/grpc_transport.h"
#include "core/clock.h"
#include "core/safetensors.h"
#include "server/coordinator/sync_engine.h"
#include "server/rpc/federation_server.h"
#include "server/store/memory_store.h"
#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

// A clock the test moves while the server's ticker reads it.
class SteppedClock final : public Clock {
 public:
  int64_t NowMs() const override { return now_ms_.load(); }
  void AdvanceMs(int64_t ms) { now_ms_ += ms; }

 private:
  std::atomic<int64_t> now_ms_{0};
};

ModelState Filled(const ModelState& like, float v) {
  ModelState m = ModelState::ZerosLike(like);
  for (float& x : m.data()) x = v;
  return m;
}

TEST(NormBoundFederationTest, TwoTinyClientsAndOneHugeOneCannotLockHonestClientsOut) {
  constexpr int kRounds = 4;
  SteppedClock clock;
  MemoryStore store;
  const ModelState model = Filled(*ModelState::Create({{"w", {4}}}), 1.0f);  // norm 2
  SyncOptions o;
  o.rounds = kRounds;
  o.clients_per_round = 6;
  o.min_clients = 5;
  o.round_deadline_ms = 1000;
  auto engine = *SyncEngine::Open(o, model, &store, &clock, nullptr, nullptr);
  auto server = *FederationServer::Start("127.0.0.1:0", engine.get(), &store, {"tiny", kRounds}, {}, {}, &clock);
  auto transport = MakeGrpcFederationTransport("127.0.0.1:" + std::to_string(server->port()));
  const std::vector<std::string> honest{"honest1", "honest2", "honest3"};
  const std::vector<std::string> tiny{"tiny1", "tiny2"};
  for (const auto& c : honest) ASSERT_OK(transport->Join(c, 10, "test"));
  for (const auto& c : tiny) ASSERT_OK(transport->Join(c, 10, "test"));
  ASSERT_OK(transport->Join("huge", 10, "test"));

  int honest_accepted = 0, huge_refused = 0;
  for (int round = 1; round <= kRounds; ++round) {
    auto upload = [&](const std::string& client, float v) {
      Result<PollAnswer> p = transport->Poll(client, 1000);
      EXPECT_OK(p.status());
      EXPECT_TRUE(p.ok() && p->kind == PollAnswer::Kind::kTask) << client << " round " << round;
      if (!p.ok() || p->kind != PollAnswer::Kind::kTask) return Status(StatusCode::kInternal, "no task");
      UploadHeader h;
      h.client_id = client;
      h.task_id = p->task.task_id;
      h.base_version = p->task.model_version;
      h.num_examples = 10;
      Status s = transport->Upload(h, EncodeSafetensors(Filled(model, v))).status();
      // The same update sent again (a lost acknowledgement) is acknowledged, not counted again.
      if (s.ok()) {
        EXPECT_OK(transport->Upload(h, EncodeSafetensors(Filled(model, v))).status());
      }
      return s;
    };
    // The tiny clients first, so that before the fix the window held their norms alone.
    for (const auto& c : tiny) ASSERT_OK(upload(c, 0.002f));  // norm 0.004
    EXPECT_THAT(upload("huge", 5e5f), StatusIs(StatusCode::kInvalidArgument, "--adaptive-norm-factor"));
    ++huge_refused;
    for (size_t i = 0; i < honest.size(); ++i) {
      const Status s = upload(honest[i], 1.45f + 0.05f * static_cast<float>(i));  // norm 2.9 to 3.1
      EXPECT_OK(s) << honest[i] << " round " << round;
      honest_accepted += s.ok();
    }
    // The huge client's task is dropped at the deadline; the round closes with five updates.
    clock.AdvanceMs(o.round_deadline_ms + 1);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (server->status().model_version < static_cast<uint64_t>(round) && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    ASSERT_EQ(server->status().model_version, static_cast<uint64_t>(round));
  }
  EXPECT_EQ(honest_accepted, 3 * kRounds);
  EXPECT_EQ(huge_refused, kRounds);
  EXPECT_TRUE(server->status().finished);
  for (float x : engine->model().data()) EXPECT_TRUE(std::isfinite(x));
  server->Shutdown();
}

// An update the server acknowledged and that the client sends again (its acknowledgement was
// lost) is acknowledged again, even when the bound has moved below it since: it was checked when
// it was taken, and refusing it now would tell the client that merged work was refused.
TEST(NormBoundFederationTest, AnAcknowledgedUpdateSentAgainIsAcknowledgedAfterTheBoundMovedBelowIt) {
  SteppedClock clock;
  MemoryStore store;
  const ModelState model = Filled(*ModelState::Create({{"w", {4}}}), 1.0f);  // norm 2
  SyncOptions o;
  o.rounds = 2;
  o.clients_per_round = 6;
  o.min_clients = 6;
  auto engine = *SyncEngine::Open(o, model, &store, &clock, nullptr, nullptr);
  auto server = *FederationServer::Start("127.0.0.1:0", engine.get(), &store, {"tiny", 2}, {}, {}, &clock);
  auto transport = MakeGrpcFederationTransport("127.0.0.1:" + std::to_string(server->port()));
  const std::vector<std::string> clients{"a", "t1", "t2", "t3", "t4", "t5"};
  for (const auto& c : clients) ASSERT_OK(transport->Join(c, 10, "test"));
  auto header = [&](const std::string& client) {
    UploadHeader h;
    Result<PollAnswer> p = transport->Poll(client, 1000);
    EXPECT_TRUE(p.ok() && p->kind == PollAnswer::Kind::kTask) << client;
    if (!p.ok() || p->kind != PollAnswer::Kind::kTask) return h;
    h.client_id = client;
    h.task_id = p->task.task_id;
    h.base_version = p->task.model_version;
    h.num_examples = 10;
    return h;
  };
  // Before five clients have sent any, the bound is 10 times the model's norm (20): norm 3 is in.
  const UploadHeader a = header("a");
  const std::string a_update = EncodeSafetensors(Filled(model, 1.5f));
  ASSERT_OK(transport->Upload(a, a_update).status());
  // Five tiny clients: the median of the clients' latest norms is now 0.004, the bound 0.04.
  for (size_t i = 1; i < clients.size(); ++i) {
    ASSERT_OK(transport->Upload(header(clients[i]), EncodeSafetensors(Filled(model, 0.002f))).status());
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (server->status().model_version < 1 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(server->status().model_version, 1u);
  // A new update of norm 3 is above the moved bound...
  EXPECT_THAT(transport->Upload(header("a"), a_update),
              StatusIs(StatusCode::kInvalidArgument, "--adaptive-norm-factor"));
  // ...but the one already taken, sent again, is acknowledged, and merged only once.
  ASSERT_OK(transport->Upload(a, a_update).status());
  EXPECT_EQ(server->status().updates_accepted, 6);
  server->Shutdown();
}

}  // namespace
}  // namespace plexus
