// CRDT gossip (gossip/protocol/crdt.cpp) as a state machine, driven by hand: pulls are carried
// out by the test (a copy of the puller's replica synced from the other's, as the network
// driver does), in orders the test chooses.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <deque>
#include <map>

#include "compression/codec.h"
#include "crdt/contribution.h"
#include "crdt/crdt_replica.h"
#include "crdt/signing.h"
#include "gossip/protocol/registry.h"
#include "gossip/protocol/topology.h"
#include "tests/testing/vector_model.h"

namespace plexus::gossip {
namespace {

// A complete graph whose live set the test controls (unknown ids count as live).
class LiveSet final : public PeerView {
 public:
  explicit LiveSet(size_t n) : live_(n, true) {}
  void OutNeighbours(NodeId self, uint64_t, std::vector<NodeId>* out) const override { Others(self, out); }
  void InNeighbours(NodeId self, uint64_t, std::vector<NodeId>* out) const override { Others(self, out); }
  bool undirected() const override { return true; }
  bool IsLive(NodeId node) const override { return node >= live_.size() || live_[node]; }
  std::vector<bool> live_;

 private:
  void Others(NodeId self, std::vector<NodeId>* out) const {
    out->clear();
    for (NodeId j = 0; j < live_.size(); ++j) {
      if (j != self && live_[j]) out->push_back(j);
    }
  }
};

struct Pull {
  NodeId to, from;
  uint64_t round;
};

// The model (1, 2, 3) as three one-value tensors a, b, c (streaming DiLoCo's fragments).
ModelState ThreeTensors() {
  ModelState m = *ModelState::Create({{"a", {1}}, {"b", {1}}, {"c", {1}}});
  const float values[] = {1, 2, 3};
  std::copy_n(values, 3, m.data().begin());
  return m;
}

// n CRDT nodes starting from different models (node i from (i, -i, 1); with `same_start`, every
// node from (1, 2, 3), as DiLoCo's peers start, or from `start` when given). "Training" adds
// (node + 1) * step to every value.
struct CrdtHarness {
  CrdtHarness(size_t n, uint64_t rounds, const std::string& merge = "mean", const std::string& spec = "crdt",
              bool same_start = false, const ModelState* start = nullptr)
      : peers(n), factory(*MakeGossip(spec, merge)) {
    for (size_t i = 0; i < n; ++i) {
      keys.push_back(*SigningKey::FromSeed(std::string(31, 'k') + static_cast<char>('a' + i)));
      authors.Add("peer-" + std::to_string(i), keys.back().public_key());
    }
    for (size_t i = 0; i < n; ++i) {
      NodeContext ctx{static_cast<NodeId>(i), &peers, 3, rounds, n, static_cast<NodeId>(n)};
      ctx.signing_key = &keys[i];
      ctx.author_keys = &authors;
      const float v = static_cast<float>(i);
      nodes.push_back(
          factory->MakeNode(ctx, std::make_shared<const ModelState>(start        ? *start
                                                                    : same_start ? testing::VectorModel({1, 2, 3})
                                                                                 : testing::VectorModel({v, -v, 1}))));
    }
  }
  void Take(NodeId i, Actions a) {
    for (Actions::Send& s : a.sends) sent.push_back({i, std::move(s)});
    for (const Actions::Sync& s : a.syncs) pulls.push_back({i, s.from, s.round});
    for (const Actions::Timer& t : a.timers) timers[i].push_back(t.id);
    rounds_done[i] += a.rounds_completed;
    if (a.train) to_train.push_back(i);
  }
  void StartAll() {
    for (NodeId i = 0; i < nodes.size(); ++i) Take(i, nodes[i]->Start(false));
  }
  void TrainAll(float step = 0.5f) {
    std::vector<NodeId> now;
    now.swap(to_train);
    for (NodeId i : now) {
      ModelState m = *nodes[i]->model();
      for (float& v : m.data()) v += static_cast<float>(i + 1) * step;
      Take(i, nodes[i]->OnTrained(std::move(m)));
    }
  }
  // Node p.to pulls from p.from: a copy of its replica synced from the other's, then joined.
  void Carry(const Pull& p) {
    const CrdtReplica* theirs = peers.IsLive(p.from) ? nodes[p.from]->replica(p.round) : nullptr;
    const CrdtReplica* mine = nodes[p.to]->replica(p.round);
    if (!theirs || !mine) return Take(p.to, nodes[p.to]->OnSynced(p.from, p.round, nullptr));
    CrdtReplica copy(*mine);
    const bool ok = copy.SyncFrom(*theirs).ok();
    Take(p.to, nodes[p.to]->OnSynced(p.from, p.round, ok ? &copy : nullptr));
  }
  void CarryAll() {
    while (!pulls.empty()) {
      Pull p = pulls.front();
      pulls.pop_front();
      if (peers.IsLive(p.to)) Carry(p);
    }
  }
  // Fires every recorded pull timer once (the nodes ask to pull again).
  void FirePullTimers() {
    std::map<NodeId, std::vector<uint64_t>> now;
    now.swap(timers);
    for (auto& [i, ids] : now) {
      for (uint64_t id : ids) {
        if ((id >> 56) == 2 && peers.IsLive(i)) Take(i, nodes[i]->OnTimer(id));
      }
    }
  }
  float Value(NodeId i, size_t k = 0) const { return nodes[i]->model()->data()[k]; }

  LiveSet peers;
  std::unique_ptr<ProtocolFactory> factory;
  std::vector<SigningKey> keys;
  AuthorKeys authors;
  std::vector<std::unique_ptr<Protocol>> nodes;
  std::deque<Pull> pulls;
  std::map<NodeId, std::vector<uint64_t>> timers;
  std::map<NodeId, uint64_t> rounds_done;
  std::vector<NodeId> to_train;
  std::vector<std::pair<NodeId, Actions::Send>> sent;  // by sender
};

TEST(CrdtGossipTest, ARoundEndsWithEveryNodeHoldingTheMeanOfTheTrainedModels) {
  CrdtHarness h(3, 2);
  h.StartAll();
  h.TrainAll();  // node i: (i, -i, 1) + (i + 1) / 2
  h.CarryAll();
  // Trained first values 0.5, 2, 3.5: the mean is 2, on every node, and the next round began.
  for (NodeId i = 0; i < 3; ++i) {
    EXPECT_EQ(h.nodes[i]->rounds_completed(), 1u);
    EXPECT_NEAR(h.Value(i), 2.0, 1e-6);
    EXPECT_EQ(*h.nodes[i]->model(), *h.nodes[0]->model());
  }
  EXPECT_EQ(h.to_train.size(), 3u);
}

TEST(CrdtGossipTest, ANodeNotMetYetIsWaitedForUntilTheRoundTimer) {
  CrdtHarness h(3, 2);
  for (NodeId i = 0; i < 2; ++i) h.Take(i, h.nodes[i]->Start(false));  // node 2 has not started
  h.TrainAll();
  h.CarryAll();
  EXPECT_EQ(h.nodes[0]->rounds_completed(), 0u);  // node 2's contribution is awaited
  for (uint64_t id : h.timers[0]) {
    if ((id >> 56) == 1) h.Take(0, h.nodes[0]->OnTimer(id));  // the round's wait timer
  }
  EXPECT_EQ(h.nodes[0]->rounds_completed(), 1u);
  EXPECT_NEAR(h.Value(0), (0.5 + 2.0) / 2, 1e-6);  // what it held: nodes 0 and 1
}

TEST(CrdtGossipTest, APeerThatLeftIsPulledOnceMoreAndItsContributionCounts) {
  CrdtHarness h(3, 1);
  h.StartAll();
  h.TrainAll();
  // Node 2's contribution is in only its own replica when it leaves (its pulls are lost).
  h.pulls.clear();
  h.Take(2, h.nodes[2]->Leave());
  for (NodeId i = 0; i < 2; ++i) h.Take(i, h.nodes[i]->OnPeerLeft(2));
  ASSERT_TRUE(std::any_of(h.pulls.begin(), h.pulls.end(), [](const Pull& p) { return p.to == 0 && p.from == 2; }));
  h.CarryAll();  // node 2 still answers: it lingers after leaving
  for (NodeId i = 0; i < 2; ++i) {
    EXPECT_EQ(h.nodes[i]->rounds_completed(), 1u);
    EXPECT_NEAR(h.Value(i), 2.0, 1e-6);
  }
}

TEST(CrdtGossipTest, APeerThatDiedWithoutContributingIsNotWaitedFor) {
  CrdtHarness h(3, 1);
  h.StartAll();
  h.to_train.erase(std::remove(h.to_train.begin(), h.to_train.end(), NodeId{2}), h.to_train.end());
  h.TrainAll();  // node 2 dies before it trains
  h.peers.live_[2] = false;
  h.CarryAll();
  EXPECT_EQ(h.nodes[0]->rounds_completed(), 0u);  // not known to be gone yet
  for (NodeId i = 0; i < 2; ++i) h.Take(i, h.nodes[i]->OnPeerLeft(2));
  h.CarryAll();  // the last pull from node 2 fails
  for (NodeId i = 0; i < 2; ++i) {
    EXPECT_EQ(h.nodes[i]->rounds_completed(), 1u);
    EXPECT_NEAR(h.Value(i), (0.5 + 2.0) / 2, 1e-6);
  }
  EXPECT_EQ(*h.nodes[0]->model(), *h.nodes[1]->model());
}

TEST(CrdtGossipTest, ARejoiningNodeTakesALivePeersModelAndRoundBeforeItTrains) {
  CrdtHarness h(3, 4);
  h.StartAll();
  h.TrainAll();
  h.CarryAll();  // round 1 done everywhere
  // Node 2 restarts with nothing saved: a fresh node at round 0.
  NodeContext ctx{2, &h.peers, 3, 4, 3, 3};
  ctx.signing_key = &h.keys[2];
  ctx.author_keys = &h.authors;
  h.nodes[2] = h.factory->MakeNode(ctx, std::make_shared<const ModelState>(testing::VectorModel({7, 7, 7})));
  Actions ask = h.nodes[2]->Start(true);
  EXPECT_FALSE(ask.train);
  ASSERT_EQ(ask.sends.size(), 1u);
  EXPECT_EQ(ask.sends[0].message.kind, Message::Kind::kModelRequest);
  const NodeId asked = ask.sends[0].to;
  Actions answer = h.nodes[asked]->OnMessage(2, ask.sends[0].message);
  ASSERT_EQ(answer.sends.size(), 1u);
  EXPECT_EQ(answer.sends[0].message.kind, Message::Kind::kModelReply);
  Actions go = h.nodes[2]->OnMessage(asked, answer.sends[0].message);
  EXPECT_TRUE(go.train);
  EXPECT_EQ(go.rounds_completed, 1u);
  EXPECT_EQ(h.nodes[2]->rounds_completed(), 1u);
  EXPECT_EQ(*h.nodes[2]->model(), *h.nodes[0]->model());
}

// DiLoCo's outer step by hand: two peers from (1, 2, 3) "train" by +0.5 and +1.0, so the mean
// pseudo-gradient is d = 0.75 in every value; with momentum 0.9 and outer_lr 0.7 (Nesterov)
// round 1: v = 0.75,  x += 0.7 (0.75 + 0.9 * 0.75)   = 0.9975
// round 2: v = 1.425, x += 0.7 (0.75 + 0.9 * 1.425)  = 1.42275
// and without Nesterov x += 0.7 v: 0.525, then 0.9975.
TEST(DiLoCoGossipTest, EveryPeerTakesTheOuterNesterovStepOnTheMeanPseudoGradient) {
  for (const bool nesterov : {true, false}) {
    CrdtHarness h(2, 2, "mean", nesterov ? "diloco" : "diloco:nesterov=false", true);
    h.StartAll();
    h.TrainAll();
    h.CarryAll();
    const double first = nesterov ? 0.9975 : 0.525, second = nesterov ? 1.42275 : 0.9975;
    for (NodeId i = 0; i < 2; ++i) EXPECT_NEAR(h.Value(i, 2), 3 + first, 1e-5) << "nesterov " << nesterov;
    h.TrainAll();
    h.CarryAll();
    for (NodeId i = 0; i < 2; ++i) {
      EXPECT_EQ(h.nodes[i]->rounds_completed(), 2u);
      EXPECT_NEAR(h.Value(i, 0), 1 + first + second, 1e-5) << "nesterov " << nesterov;
      EXPECT_EQ(*h.nodes[i]->model(), *h.nodes[0]->model());
    }
  }
}

// A peer that restarts with nothing saved takes a live peer's model, round and outer momentum (the
// two parts of the answer in either order), and from then on steps exactly as the others do: a
// momentum of zero would put it 0.7 * 0.9 * 0.9 * 1.425 elsewhere after the next round.
TEST(DiLoCoGossipTest, ARejoiningPeerTakesTheOuterMomentumWithTheModelAndStepsAsTheOthers) {
  CrdtHarness h(3, 4, "mean", "diloco", true);
  h.StartAll();
  for (int r = 0; r < 2; ++r) {
    h.TrainAll();
    h.CarryAll();
  }
  NodeContext ctx{2, &h.peers, 3, 4, 3, 3};
  ctx.signing_key = &h.keys[2];
  ctx.author_keys = &h.authors;
  h.nodes[2] = h.factory->MakeNode(ctx, std::make_shared<const ModelState>(testing::VectorModel({1, 2, 3})));
  h.to_train.erase(std::remove(h.to_train.begin(), h.to_train.end(), NodeId{2}), h.to_train.end());
  Actions ask = h.nodes[2]->Start(true);
  EXPECT_FALSE(ask.train);
  ASSERT_EQ(ask.sends.size(), 1u);
  const NodeId asked = ask.sends[0].to;
  Actions answer = h.nodes[asked]->OnMessage(2, ask.sends[0].message);
  ASSERT_EQ(answer.sends.size(), 2u);
  EXPECT_EQ(answer.sends[0].message.kind, Message::Kind::kOuterState);
  EXPECT_EQ(answer.sends[1].message.kind, Message::Kind::kModelReply);
  Actions half = h.nodes[2]->OnMessage(asked, answer.sends[1].message);  // the model first
  EXPECT_FALSE(half.train);
  EXPECT_EQ(h.nodes[2]->rounds_completed(), 0u);
  Actions go = h.nodes[2]->OnMessage(asked, answer.sends[0].message);
  EXPECT_TRUE(go.train);
  EXPECT_EQ(go.rounds_completed, 2u);
  h.Take(2, Actions{});
  h.to_train.push_back(2);
  EXPECT_EQ(*h.nodes[2]->model(), *h.nodes[0]->model());
  h.TrainAll();
  h.CarryAll();
  for (NodeId i = 0; i < 3; ++i) {
    EXPECT_EQ(h.nodes[i]->rounds_completed(), 3u);
    EXPECT_EQ(*h.nodes[i]->model(), *h.nodes[0]->model()) << "node " << i;
  }
}

// Eager DiLoCo by hand: two peers from (1, 2, 3) whose training adds 0.5 and 1.0. Each steps as
// soon as it has trained, with its own delta in place of the average still in flight:
// round 0: d~ = 0.5 (peer 0) and 1.0 (peer 1): x += 0.7 (0.5 + 0.45) = 0.665, 0.7 (1 + 0.9) = 1.33
// round 1: the others' deltas of round 0 have arrived: d~ = (own + 2 * 0.75 - own of round 0) / 2
//          = 0.75 on both; v = 1.2 and 1.65: x += 0.7 (0.75 + 1.08) = 1.281, 0.7 (0.75 + 1.485)
//          = 1.5645
// The same whether round 1 was trained before round 0's exchange ended (its contribution waits)
// or after; and the peers' models differ, each stepping with its own delta.
TEST(DiLoCoGossipTest, EagerPeersStepWithTheirOwnFreshDeltaAndTheOthersOfTheLastRound) {
  for (const bool overlapped : {false, true}) {
    CrdtHarness h(2, 2, "mean", "diloco:eager=true", true);
    h.StartAll();
    h.TrainAll();  // round 0 contributed, the eager step taken, round 1 asked for at once
    EXPECT_EQ(h.to_train.size(), 2u);
    EXPECT_NEAR(h.Value(0, 2), 3.665, 1e-5);
    EXPECT_NEAR(h.Value(1, 2), 4.33, 1e-5);
    if (overlapped) {
      h.TrainAll();  // round 1 trained while round 0 is still being pulled: it waits
      EXPECT_EQ(h.nodes[0]->rounds_completed(), 0u);
      h.CarryAll();
    } else {
      h.CarryAll();
      EXPECT_EQ(h.nodes[0]->rounds_completed(), 1u);
      h.TrainAll();
      h.CarryAll();
    }
    for (int round = 0; round < 3 && h.nodes[0]->rounds_completed() < 2; ++round) {
      h.FirePullTimers();
      h.CarryAll();
    }
    EXPECT_EQ(h.nodes[0]->rounds_completed(), 2u) << "overlapped " << overlapped;
    EXPECT_EQ(h.nodes[1]->rounds_completed(), 2u) << "overlapped " << overlapped;
    EXPECT_NEAR(h.Value(0, 2), 3 + 0.665 + 1.281, 1e-5) << "overlapped " << overlapped;
    EXPECT_NEAR(h.Value(1, 2), 3 + 1.33 + 1.5645, 1e-5) << "overlapped " << overlapped;
    EXPECT_TRUE(h.to_train.empty());
  }
}

// Streaming DiLoCo's schedule by hand, two fragments of (a, b, c) = (1, 2, 3): fragment 0 holds
// a and c, fragment 1 holds b; mix 0 (the outer values replace the replica's), no overlap; the
// peers' training adds 0.5 and 1.0.
// round 0, fragment 0: deltas 0.5 and 1.0 for a and c, mean 0.75: x_a = 1.9975, x_c = 3.9975;
//          replicas (1.9975, 2.5, 3.9975) and (1.9975, 3, 3.9975); b stays each peer's own
// round 1, fragment 1: b trained to 3.0 and 4.0, deltas from x_b = 2: 1.0 and 2.0, mean 1.5:
//          x_b = 2 + 0.7 (1.5 + 0.9 * 1.5) = 3.995; replicas (2.4975, 3.995, 4.4975) and
//          (2.9975, 3.995, 4.9975): a and c wait for round 2
TEST(DiLoCoGossipTest, StreamingPeersExchangeOneFragmentPerRoundOnAStaggeredSchedule) {
  const ModelState start = ThreeTensors();
  CrdtHarness h(2, 2, "mean", "diloco:fragments=2,mix=0,overlap=false", false, &start);
  h.StartAll();
  h.TrainAll();
  EXPECT_TRUE(h.to_train.empty());  // without overlap the peers wait for the exchange
  h.CarryAll();
  const std::vector<std::vector<float>> after0 = {{1.9975f, 2.5f, 3.9975f}, {1.9975f, 3.0f, 3.9975f}};
  for (NodeId i = 0; i < 2; ++i) {
    for (size_t k = 0; k < 3; ++k) EXPECT_NEAR(h.Value(i, k), after0[i][k], 1e-5) << i << " " << k;
    // Each contribution held one fragment: two values.
    const CrdtReplica* r = h.nodes[i]->replica(0);
    ASSERT_NE(r, nullptr);
    for (const std::string& id : r->LiveIds()) EXPECT_EQ(r->Find(id)->delta.num_params(), 2u);
  }
  h.TrainAll();
  h.CarryAll();
  const std::vector<std::vector<float>> after1 = {{2.4975f, 3.995f, 4.4975f}, {2.9975f, 3.995f, 4.9975f}};
  for (NodeId i = 0; i < 2; ++i) {
    EXPECT_EQ(h.nodes[i]->rounds_completed(), 2u);
    for (size_t k = 0; k < 3; ++k) EXPECT_NEAR(h.Value(i, k), after1[i][k], 1e-5) << i << " " << k;
  }
}

// With overlap each peer trains round 1 while fragment 0 is exchanged, and the arriving values
// are mixed (0.5) into what round 1 trained: a and c of (2.0, 3.0, 4.0) and (3, 4, 5) become
// (1.99875, 3.99875) and (2.49875, 4.49875); b's deltas 1.0 and 2.0 give x_b = 3.995 as above,
// mixed in at the end: 3.4975 and 3.9975. The same whichever of the two comes first.
TEST(DiLoCoGossipTest, StreamingPeersOverlapTheExchangeWithTheNextRoundAndMixTheFragmentIn) {
  const ModelState start = ThreeTensors();
  for (const bool trained_first : {false, true}) {
    CrdtHarness h(2, 2, "mean", "diloco:fragments=2,mix=0.5", false, &start);
    h.StartAll();
    h.TrainAll();
    EXPECT_EQ(h.to_train.size(), 2u);  // round 1 trains at once
    if (trained_first) {
      h.TrainAll();
      h.CarryAll();
    } else {
      h.CarryAll();
      h.TrainAll();
      h.CarryAll();
    }
    for (int extra = 0; extra < 3 && h.nodes[1]->rounds_completed() < 2; ++extra) {
      h.FirePullTimers();
      h.CarryAll();
    }
    const std::vector<std::vector<float>> expected = {{1.99875f, 3.4975f, 3.99875f}, {2.49875f, 3.9975f, 4.49875f}};
    for (NodeId i = 0; i < 2; ++i) {
      EXPECT_EQ(h.nodes[i]->rounds_completed(), 2u) << "trained first " << trained_first;
      for (size_t k = 0; k < 3; ++k) {
        EXPECT_NEAR(h.Value(i, k), expected[i][k], 1e-5) << i << " " << k << " trained first " << trained_first;
      }
    }
  }
}

// One fragment, replaced outright, without overlap is DiLoCo, byte for byte.
TEST(DiLoCoGossipTest, StreamingWithOneFragmentAndNoMixIsDiLoCo) {
  CrdtHarness plain(3, 3, "mean", "diloco", true);
  CrdtHarness streaming(3, 3, "mean", "diloco:fragments=1,mix=0,overlap=false", true);
  for (CrdtHarness* h : {&plain, &streaming}) {
    h->StartAll();
    for (int r = 0; r < 3; ++r) {
      h->TrainAll(0.25f);
      h->CarryAll();
    }
  }
  for (NodeId i = 0; i < 3; ++i) {
    EXPECT_EQ(streaming.nodes[i]->rounds_completed(), 3u);
    // The values, byte for byte (the versions count differently).
    EXPECT_EQ(streaming.nodes[i]->model()->ContentSha256(), plain.nodes[i]->model()->ContentSha256()) << "node " << i;
  }
}

TEST(DiLoCoGossipTest, FragmentsThatCannotHoldAreRefused) {
  for (const char* bad :
       {"diloco:fragments=1.5", "diloco:fragments=-1", "diloco:fragments=2,mix=1.5", "diloco:fragments=2,eager=true"}) {
    auto f = MakeGossip(bad, "mean");
    ASSERT_FALSE(f.ok()) << bad;
    EXPECT_NE(f.status().message().find("--gossip"), std::string::npos) << bad;
  }
  auto f = MakeGossip("diloco:fragments=4", "mean");
  ASSERT_TRUE(f.ok());
  const Status s = (*f)->CheckModel(ThreeTensors());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("fragments=4"), std::string::npos) << s.message();
  EXPECT_NE((*f)->CheckModel(testing::VectorModel(std::vector<float>(4, 0))).message().find("1 tensors"),
            std::string::npos);
  EXPECT_TRUE((*MakeGossip("diloco:fragments=3", "mean"))->CheckModel(ThreeTensors()).ok());
}

TEST(DiLoCoGossipTest, EagerUpdatesNeedThePlainMean) {
  EXPECT_TRUE(MakeGossip("diloco:eager=true", "mean").ok());
  auto f = MakeGossip("diloco:eager=true", "median");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("--merge"), std::string::npos) << f.status().message();
}

// A node whose outer model left the others' (here: it started from another model, as after a
// round that ended by its timer with another set) sees it in the bases of the round's
// contributions: two of three came from another x than its own. It asks one of those peers for
// x, v and round, takes them, and from then on steps as the others do.
TEST(DiLoCoGossipTest, APeerWhoseOuterModelLeftTheOthersTakesTheMajoritysBack) {
  CrdtHarness h(3, 3, "mean", "diloco", true);
  NodeContext ctx{2, &h.peers, 3, 3, 3, 3};
  ctx.signing_key = &h.keys[2];
  ctx.author_keys = &h.authors;
  h.nodes[2] = h.factory->MakeNode(ctx, std::make_shared<const ModelState>(testing::VectorModel({7, 7, 7})));
  h.StartAll();
  h.TrainAll();
  h.CarryAll();
  EXPECT_EQ(h.nodes[2]->rounds_completed(), 1u);
  EXPECT_NE(*h.nodes[2]->model(), *h.nodes[0]->model());
  // Nodes 0 and 1 train on; node 2 asked a peer of the majority instead.
  EXPECT_EQ(std::count(h.to_train.begin(), h.to_train.end(), NodeId{2}), 0);
  std::vector<std::pair<NodeId, Actions::Send>> requests;
  for (auto& [from, send] : h.sent) {
    if (send.message.kind == Message::Kind::kModelRequest) requests.push_back({from, send});
  }
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].first, 2u);
  const NodeId asked = requests[0].second.to;
  EXPECT_NE(asked, 2u);
  h.sent.clear();
  h.Take(asked, h.nodes[asked]->OnMessage(2, requests[0].second.message));
  for (const auto& [from, send] : std::vector<std::pair<NodeId, Actions::Send>>(h.sent)) {
    if (send.to == 2) h.Take(2, h.nodes[2]->OnMessage(from, send.message));
  }
  EXPECT_EQ(*h.nodes[2]->model(), *h.nodes[0]->model());
  for (int r = 0; r < 2; ++r) {
    h.TrainAll();
    h.CarryAll();
  }
  for (NodeId i = 0; i < 3; ++i) {
    EXPECT_EQ(h.nodes[i]->rounds_completed(), 3u);
    EXPECT_EQ(*h.nodes[i]->model(), *h.nodes[0]->model()) << "node " << i;
  }
}

// Trains node i of `h` to a delta that varies from value to value (so that a codec's rounding
// shows): value j gains (i + 1) * 0.01 * (((7 j + 3 i) mod 11) - 5) + 0.002 j.
void TrainUnevenly(CrdtHarness& h) {
  std::vector<NodeId> now;
  now.swap(h.to_train);
  for (NodeId i : now) {
    ModelState m = *h.nodes[i]->model();
    std::span<float> v = m.data();
    for (size_t j = 0; j < v.size(); ++j) {
      v[j] += static_cast<float>((i + 1) * 0.01 * (static_cast<double>((7 * j + 3 * i) % 11) - 5) + 0.002 * j);
    }
    h.Take(i, h.nodes[i]->OnTrained(std::move(m)));
  }
}

// Node i's own contribution to `round`.
const Contribution* OwnContribution(const CrdtHarness& h, NodeId i, uint64_t round) {
  const CrdtReplica* r = h.nodes[i]->replica(round);
  if (r == nullptr) return nullptr;
  for (const std::string& id : r->LiveIds()) {
    const Contribution* c = r->Find(id);
    if (c != nullptr && c->author == "peer-" + std::to_string(i)) return c;
  }
  return nullptr;
}

std::vector<float> Ramp(size_t n) {
  std::vector<float> v(n);
  for (size_t j = 0; j < n; ++j) v[j] = 0.5f + 0.001f * static_cast<float>(j);
  return v;
}

// int8 pseudo-gradients (codec=int8): each contribution carries the codec's bytes (about a
// quarter of float32's) and is their decoding, on its author as on the peer that pulled it; the
// outer step (outer_lr 1, no momentum: x += the mean) runs on the decoded values, not on what
// the peers trained, and every peer ends with the same bytes.
TEST(DiLoCoGossipTest, Int8PseudoGradientsTravelAsTheirBytesAndEveryPeerStepsOnTheirDecoding) {
  const ModelState start = testing::VectorModel(Ramp(1000));
  CrdtHarness h(2, 1, "mean", "diloco:codec=int8,outer_lr=1,momentum=0,nesterov=false", true, &start);
  h.StartAll();
  EXPECT_EQ(h.nodes[0]->contribution_codec(), "int8");
  TrainUnevenly(h);
  const std::unique_ptr<Codec> int8 = *MakeCodec("int8");
  std::vector<ModelState> decoded;
  bool rounded = false;
  for (NodeId i = 0; i < 2; ++i) {
    const Contribution* c = OwnContribution(h, i, 0);
    ASSERT_NE(c, nullptr);
    ASSERT_NE(c->coded, nullptr);
    EXPECT_EQ(c->codec, "int8");
    EXPECT_LT(c->WireBytes(), c->delta.num_bytes() / 3);
    Result<ModelState> d = int8->Decode(*c->coded, start);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->data().size(), 1000u);
    EXPECT_TRUE(std::equal(d->data().begin(), d->data().end(), c->delta.data().begin()));
    for (size_t j = 0; j < 1000; ++j) {
      const float trained = static_cast<float>((i + 1) * 0.01 * (static_cast<double>((7 * j + 3 * i) % 11) - 5) +
                                               0.002 * static_cast<double>(j));
      rounded = rounded || std::abs(d->data()[j] - trained) > 1e-6f;
    }
    decoded.push_back(std::move(d).value());
  }
  EXPECT_TRUE(rounded) << "int8 kept every value exactly: the test shows nothing";
  h.CarryAll();
  for (NodeId i = 0; i < 2; ++i) {
    ASSERT_EQ(h.nodes[i]->rounds_completed(), 1u);
    EXPECT_EQ(*h.nodes[i]->model(), *h.nodes[0]->model());
    // The contribution node i pulled is the bytes its author sent.
    const Contribution* theirs = OwnContribution(h, 1 - i, 0);
    const CrdtReplica* mine = h.nodes[i]->replica(0);
    ASSERT_NE(mine, nullptr);
    ASSERT_NE(theirs, nullptr);
    const Contribution* pulled = mine->Find(theirs->Id());
    ASSERT_NE(pulled, nullptr);
    ASSERT_NE(pulled->coded, nullptr);
    EXPECT_EQ(*pulled->coded, *theirs->coded);
  }
  for (size_t j = 0; j < 1000; j += 97) {
    const double mean = (static_cast<double>(decoded[0].data()[j]) + decoded[1].data()[j]) / 2;
    EXPECT_NEAR(h.Value(0, j), start.data()[j] + mean, 2e-6) << j;
  }
}

// DeMo between peers by hand (chunk 4, k 1, decay 0.5): each peer's contribution is the DCT
// codec's bytes of its pseudo-gradient added to its momentum (the codec's residual, kept from
// round to round), and every peer steps x += lr sign(mean of the decoded components). The
// expected bytes come from the same codec run here on the same deltas.
TEST(DeMoGossipTest, PeersStepBySignOfTheMeanOfTheirMomentumsFastComponentsAndKeepTheRest) {
  const ModelState start = testing::VectorModel(Ramp(16));
  CrdtHarness h(2, 2, "mean", "demo:lr=0.01,chunk=4,k=1,decay=0.5", true, &start);
  const std::unique_ptr<Codec> dct = *MakeCodec("dct:chunk=4,k=1,decay=0.5");
  EXPECT_EQ(h.nodes[0]->contribution_codec(), dct->spec());
  std::vector<ModelState> residual(2, ModelState::ZerosLike(start));
  h.StartAll();
  for (uint64_t round = 0; round < 2; ++round) {
    const ModelState x = *h.nodes[0]->model();
    TrainUnevenly(h);
    std::vector<float> sum(16, 0);
    for (NodeId i = 0; i < 2; ++i) {
      ModelState delta = ModelState::ZerosLike(start);
      for (size_t j = 0; j < 16; ++j) {
        delta.data()[j] = static_cast<float>(
            (x.data()[j] + static_cast<float>((i + 1) * 0.01 * (static_cast<double>((7 * j + 3 * i) % 11) - 5) +
                                              0.002 * static_cast<double>(j))) -
            x.data()[j]);
      }
      const std::string expected = dct->Encode(delta, &residual[i], 0);
      const Contribution* c = OwnContribution(h, i, round);
      ASSERT_NE(c, nullptr);
      ASSERT_NE(c->coded, nullptr);
      EXPECT_EQ(*c->coded, expected) << "round " << round << " node " << i;
      const ModelState d = *dct->Decode(expected, start);
      EXPECT_EQ(c->delta, d);
      for (size_t j = 0; j < 16; ++j) sum[j] += d.data()[j];
    }
    h.CarryAll();
    for (NodeId i = 0; i < 2; ++i) {
      ASSERT_EQ(h.nodes[i]->rounds_completed(), round + 1);
      EXPECT_EQ(*h.nodes[i]->model(), *h.nodes[0]->model());
    }
    int moved = 0;
    for (size_t j = 0; j < 16; ++j) {
      const double sign = sum[j] > 0 ? 1 : sum[j] < 0 ? -1 : 0;
      EXPECT_NEAR(h.Value(0, j), x.data()[j] + 0.01 * sign, 1e-6) << "round " << round << " value " << j;
      moved += sign != 0;
    }
    EXPECT_GT(moved, 0);
  }
  // The momentum kept what was not sent: the second round's bytes above came from it.
  EXPECT_TRUE(std::any_of(residual[0].data().begin(), residual[0].data().end(), [](float v) { return v != 0; }));
}

TEST(DeMoGossipTest, BadSettingsAreRefusedNamingTheFlag) {
  auto ok = MakeGossip("demo", "mean");
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE((*ok)->needs_local_steps());
  for (const char* bad : {"demo:lr=0", "demo:chunk=0", "demo:k=1.5", "demo:decay=2"}) {
    auto f = MakeGossip(bad, "mean");
    ASSERT_FALSE(f.ok()) << bad;
    EXPECT_NE(f.status().message().find("--gossip"), std::string::npos) << bad << ": " << f.status().message();
  }
  auto robust = MakeGossip("demo", "median");
  ASSERT_FALSE(robust.ok());
  EXPECT_NE(robust.status().message().find("--merge"), std::string::npos) << robust.status().message();
  for (const char* bad : {"diloco:codec=topk", "diloco:codec=terngrad", "diloco:codec=nope"}) {
    auto f = MakeGossip(bad, "mean");
    ASSERT_FALSE(f.ok()) << bad;
    EXPECT_NE(f.status().message().find("diloco:codec"), std::string::npos) << bad << ": " << f.status().message();
  }
  EXPECT_TRUE(MakeGossip("diloco:codec=fp16,fragments=2", "mean").ok());
}

TEST(DiLoCoGossipTest, BadOuterSettingsAreRefused) {
  EXPECT_TRUE(MakeGossip("diloco:outer_lr=0.5,momentum=0,nesterov=false", "mean").ok());
  for (const char* bad : {"diloco:outer_lr=0", "diloco:momentum=1", "diloco:momentum=-0.1", "diloco:wait_ms=0"}) {
    auto f = MakeGossip(bad, "mean");
    ASSERT_FALSE(f.ok()) << bad;
    EXPECT_NE(f.status().message().find("--gossip"), std::string::npos) << bad;
  }
  EXPECT_FALSE(MakeGossip("diloco", "balance").ok());
}

TEST(CrdtGossipTest, AMergeThatIsNoStrategyIsRefused) {
  auto f = MakeGossip("crdt", "balance");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("--merge"), std::string::npos);
  EXPECT_TRUE(MakeGossip("crdt", "median").ok());
  EXPECT_FALSE(MakeGossip("crdt:interval_ms=0", "mean").ok());
}

// Whatever the order pulls are carried out in, repeated or not, every node ends every round with
// the same bytes, and with a robust strategy too; and so do DiLoCo's peers, whose outer steps
// follow the merges.
RC_GTEST_PROP(CrdtGossipProperty, EveryOrderOfPullsGivesEveryNodeTheIdenticalModel, ()) {
  const size_t n = *rc::gen::inRange<size_t>(2, 6);
  const uint64_t rounds = *rc::gen::inRange<uint64_t>(1, 4);
  const std::string merge = *rc::gen::element<std::string>("mean", "median", "trimmed_mean:beta=0.2");
  // Plain CRDT gossip, DiLoCo in float32 and in int8, DeMo (which takes the mean only).
  const int kind = *rc::gen::inRange(0, 4);
  const char* const specs[] = {"crdt", "diloco", "diloco:codec=int8", "demo:lr=0.1,chunk=2,k=1"};
  CrdtHarness h(n, rounds, kind == 3 ? "mean" : merge, specs[kind], kind > 0);
  h.StartAll();
  for (int step = 0; step < 10000; ++step) {
    h.TrainAll();
    if (h.pulls.empty()) {
      bool all_done = true;
      for (NodeId i = 0; i < n; ++i) all_done = all_done && h.nodes[i]->rounds_completed() == rounds;
      if (all_done) break;
      h.FirePullTimers();
      continue;
    }
    // A random pending pull, sometimes carried out twice.
    const size_t k = *rc::gen::inRange<size_t>(0, h.pulls.size());
    const Pull p = h.pulls[k];
    if (!*rc::gen::inRange(0, 4)) h.pulls.push_back(p);
    h.pulls.erase(h.pulls.begin() + static_cast<std::ptrdiff_t>(k));
    h.Carry(p);
  }
  for (NodeId i = 0; i < n; ++i) {
    RC_ASSERT(h.nodes[i]->rounds_completed() == rounds);
    RC_ASSERT(*h.nodes[i]->model() == *h.nodes[0]->model());
  }
}

}  // namespace
}  // namespace plexus::gossip
