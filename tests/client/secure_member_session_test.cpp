// SecureMemberSession: members driven by their sessions alone against a real SyncEngine with
// secure aggregation, and sessions facing a server that misbehaves.
#include "client/secure_member_session.h"

#include <map>
#include <string>
#include <vector>

#include "server/coordinator/sync_engine.h"
#include "server/store/memory_store.h"
#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using Kind = SecureAction::Kind;
using Stage = secagg::Server::Stage;

ModelState Zeros() { return *ModelState::Create({{"w", {8}}}); }

TEST(SecureMemberSessionTest, MembersDrivenByTheirSessionsPublishTheirMean) {
  SyncOptions o;
  o.rounds = 1;
  o.clients_per_round = 5;
  o.min_clients = 3;
  o.selection_wait_ms = 0;
  o.secagg = *SecAggSettings::Parse("");
  ManualClock clock;
  MemoryStore store;
  auto engine = std::move(SyncEngine::Open(o, Zeros(), &store, &clock, nullptr, nullptr)).value();
  const std::vector<std::string> ids = {"a", "b", "c", "d", "e"};
  for (const auto& id : ids) ASSERT_OK(engine->Join({id, 10, "test"}));
  std::map<std::string, std::string> task;
  std::map<std::string, SecureMemberSession> sessions;
  std::map<std::string, secagg::View> views;
  for (const auto& id : ids) {
    task[id] = engine->Poll(id)->task.task_id;
    secagg::Call ask;
    ask.want_setup = true;
    views[id] = *engine->SecureAggregation(id, task[id], ask);
    sessions.emplace(id, std::move(SecureMemberSession::Create(*views[id].setup)).value());
  }
  // Round-robin: each member takes one action per turn, as independent clients would.
  std::map<std::string, bool> done;
  int trained = 0;
  for (int turn = 0; turn < 100 && done.size() < ids.size(); ++turn) {
    for (const auto& id : ids) {
      if (done.count(id)) continue;
      SecureAction next = sessions.at(id).Next(views[id]);
      ASSERT_NE(next.kind, Kind::kFail) << id << ": " << next.error.ToString();
      if (next.kind == Kind::kDone) {
        done[id] = true;
        continue;
      }
      if (next.kind == Kind::kTrain) {
        ++trained;
        const std::vector<float> delta(8, id == "a" ? 0.5f : 0.25f);  // a trains on 10 examples, the rest on 30
        ASSERT_OK(sessions.at(id).SetUpdate(delta, id == "a" ? 10 : 30, Secret32{9}));
      }
      Result<secagg::View> v =
          engine->SecureAggregation(id, task[id], next.kind == Kind::kSend ? next.call : secagg::Call{});
      ASSERT_OK(v);
      views[id] = *v;
    }
  }
  EXPECT_EQ(done.size(), ids.size());
  EXPECT_EQ(trained, 5);
  ASSERT_EQ(engine->model().version(), 1u);
  // (10·0.5 + 4·30·0.25) / (10 + 120) with weights over the cap of 65536 examples.
  // Within the rounding bound 2·k·step/Σw, about 1.2e-5 for these small weights.
  EXPECT_NEAR(engine->model().data()[0], (10 * 0.5 + 120 * 0.25) / 130.0, 2e-5);
  EXPECT_GT(sessions.at("a").key_bytes(), 0);
  EXPECT_EQ(sessions.at("a").masked_bytes(), 4 * 9);
}

// A session at the unmask stage, after a server relayed this member's own keys to it.
secagg::Setup SetupOf(uint32_t member) {
  secagg::Setup s;
  s.params.round = 1;
  s.params.members = {1, 2, 3};
  s.params.degree = 2;
  s.params.threshold = 2;
  s.params.length = 3;
  s.member = member;
  s.clip = 1;
  s.weight_cap = 10;
  return s;
}

TEST(SecureMemberSessionTest, AServerAskingForBothSecretsOfAMemberIsRefused) {
  std::vector<SecureMemberSession> m;
  std::vector<secagg::KeyAdvert> adverts;
  for (uint32_t id = 1; id <= 3; ++id) {
    m.push_back(std::move(SecureMemberSession::Create(SetupOf(id))).value());
    secagg::View v;
    SecureAction a = m.back().Next(v);
    ASSERT_EQ(a.kind, Kind::kSend);
    adverts.push_back(a.call.advert);
  }
  std::map<uint32_t, std::map<uint32_t, std::vector<uint8_t>>> to;  // by recipient, by sender
  for (uint32_t id = 1; id <= 3; ++id) {
    secagg::View v;
    v.stage = Stage::kShareKeys;
    for (const auto& a : adverts) {
      if (a.from != id) v.adverts.push_back(a);
    }
    SecureAction a = m[id - 1].Next(v);
    ASSERT_EQ(a.kind, Kind::kSend) << a.error.ToString();
    for (const auto& [r, sealed] : a.call.shares.to) to[r][id] = sealed;
  }
  secagg::View masked;
  masked.stage = Stage::kMaskedInput;
  masked.shares = to[1];
  SecureMemberSession& one = m[0];
  ASSERT_EQ(one.Next(masked).kind, Kind::kTrain);
  ASSERT_OK(one.SetUpdate(std::vector<float>{0.1f, 0.2f}, 5, Secret32{}));
  SecureAction sent = one.Next(masked);
  ASSERT_EQ(sent.kind, Kind::kSend);
  masked.answered = true;
  secagg::View unmask;
  unmask.stage = Stage::kUnmask;
  unmask.unmask.survivors = {1, 2};
  unmask.unmask.dropped = {2};  // member 2 named survivor and dropped: both its secrets asked for
  SecureAction refused = one.Next(unmask);
  EXPECT_EQ(refused.kind, Kind::kFail);
  EXPECT_THAT(refused.error, ::plexus::testing::StatusIs(StatusCode::kAborted, "refused the server's unmask request"));
  EXPECT_TRUE(refused.call.revealed.self_seed.empty() && refused.call.revealed.mask_key.empty());
}

TEST(SecureMemberSessionTest, AGroupThatMovedOnWithoutTheMemberOrAbortedEndsTheTask) {
  SecureMemberSession late = std::move(SecureMemberSession::Create(SetupOf(1))).value();
  secagg::View v;
  v.stage = Stage::kShareKeys;  // the advertise stage closed before this member's keys went out
  EXPECT_THAT(late.Next(v).error, ::plexus::testing::StatusIs(StatusCode::kNotFound, "without this client's"));
  SecureMemberSession aborted = std::move(SecureMemberSession::Create(SetupOf(2))).value();
  v.stage = Stage::kAborted;
  v.abort_reason = "only 1 of 3 members answered";
  EXPECT_THAT(aborted.Next(v).error, ::plexus::testing::StatusIs(StatusCode::kAborted, "only 1 of 3"));
}

}  // namespace
}  // namespace plexus
