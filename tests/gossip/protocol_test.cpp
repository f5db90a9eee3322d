// The gossip protocols as state machines, driven by hand: every message, timer and membership
// change is an explicit step of the test.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <deque>
#include <limits>
#include <map>

#include "gossip/protocol/push_sum.h"
#include "gossip/protocol/registry.h"
#include "gossip/protocol/round_gossip.h"
#include "gossip/protocol/topology.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/vector_model.h"

namespace plexus::gossip {
namespace {

ModelState Vector(const std::vector<float>& values) { return ::plexus::testing::VectorModel(values); }

// A topology with a live set the test controls.
class TestPeers final : public PeerView {
 public:
  explicit TestPeers(Topology t) : live_(t.size(), true), t_(std::move(t)) {}
  void OutNeighbours(NodeId self, uint64_t round, std::vector<NodeId>* out) const override {
    t_.Out(self, round, out);
    std::erase_if(*out, [&](NodeId j) { return !live_[j]; });
  }
  void InNeighbours(NodeId self, uint64_t round, std::vector<NodeId>* out) const override {
    t_.In(self, round, out);
    std::erase_if(*out, [&](NodeId j) { return !live_[j]; });
  }
  bool undirected() const override { return !t_.directed(); }
  bool IsLive(NodeId node) const override { return node >= live_.size() || live_[node]; }
  std::vector<bool> live_;

 private:
  Topology t_;
};

struct Envelope {
  NodeId from, to;
  Message message;
};

// n nodes of one algorithm; sends go to a queue the test delivers from, timers are recorded.
struct Harness {
  Harness(const std::string& gossip, const std::string& topology, std::vector<ModelState> starts,
          const std::string& merge = "mean")
      : peers(*Topology::Parse(topology, starts.size(), 1)), factory(*MakeGossip(gossip, merge)) {
    const size_t n = starts.size();
    for (size_t i = 0; i < n; ++i) {
      nodes.push_back(factory->MakeNode({static_cast<NodeId>(i), &peers, 3, 10, n, static_cast<NodeId>(n)},
                                        std::make_shared<const ModelState>(std::move(starts[i]))));
    }
    if (factory->needs_server()) {
      nodes.push_back(factory->MakeServer({static_cast<NodeId>(n), &peers, 3, 10, n, static_cast<NodeId>(n)}));
    }
  }
  void Take(NodeId i, Actions a) {
    for (Actions::Send& s : a.sends) queue.push_back({i, s.to, std::move(s.message)});
    for (const Actions::Timer& t : a.timers) timers[i].push_back(t.id);
    if (a.train) to_train.push_back({i, nodes[i]->model()});  // training starts from the model of now
  }
  // "Trains" every node that asked: adds `step` to every value (or nothing).
  void TrainAll(float step = 0.0f) {
    std::vector<std::pair<NodeId, std::shared_ptr<const ModelState>>> now;
    now.swap(to_train);
    for (const auto& [i, start] : now) {
      ModelState m = *start;
      for (float& v : m.data()) v += step;
      Take(i, nodes[i]->OnTrained(std::move(m)));
    }
  }
  void DeliverAll() {
    while (!queue.empty()) {
      Envelope e = std::move(queue.front());
      queue.pop_front();
      if (peers.IsLive(e.to)) Take(e.to, nodes[e.to]->OnMessage(e.from, e.message));
    }
  }
  // Delivers everything but what goes to `held`, which it returns.
  std::vector<Envelope> DeliverAllExceptTo(NodeId held) {
    std::vector<Envelope> kept;
    while (!queue.empty()) {
      Envelope e = std::move(queue.front());
      queue.pop_front();
      if (e.to == held) {
        kept.push_back(std::move(e));
      } else if (peers.IsLive(e.to)) {
        Take(e.to, nodes[e.to]->OnMessage(e.from, e.message));
      }
    }
    return kept;
  }
  float Value(NodeId i, size_t k = 0) const { return nodes[i]->model()->data()[k]; }

  TestPeers peers;
  std::unique_ptr<ProtocolFactory> factory;
  std::vector<std::unique_ptr<Protocol>> nodes;
  std::deque<Envelope> queue;
  std::map<NodeId, std::vector<uint64_t>> timers;
  std::vector<std::pair<NodeId, std::shared_ptr<const ModelState>>> to_train;
};

TEST(DpsgdTest, OneRoundOnARingIsTheMetropolisHastingsMean) {
  Harness h("dpsgd", "ring", {Vector({0}), Vector({3}), Vector({6}), Vector({9})});
  for (NodeId i = 0; i < 4; ++i) h.Take(i, h.nodes[i]->Start(false));
  h.TrainAll();
  h.DeliverAll();  // every node has all its neighbours' models: it merges without its timer
  // Degree 2 everywhere: 1/3 for self and each neighbour. Node 0's neighbours are 3 and 1.
  EXPECT_NEAR(h.Value(0), (0 + 9 + 3) / 3.0, 1e-5);
  EXPECT_NEAR(h.Value(1), (3 + 0 + 6) / 3.0, 1e-5);
  for (NodeId i = 0; i < 4; ++i) EXPECT_EQ(h.nodes[i]->rounds_completed(), 1u);
  // The mean is kept (doubly stochastic), and the next round has begun.
  EXPECT_NEAR(h.Value(0) + h.Value(1) + h.Value(2) + h.Value(3), 18.0, 1e-4);
  EXPECT_EQ(h.to_train.size(), 4u);
}

TEST(DpsgdTest, ANeighbourThatLeavesStopsBeingAwaited) {
  Harness h("dpsgd", "ring", {Vector({0}), Vector({3}), Vector({6}), Vector({9})});
  for (NodeId i = 0; i < 4; ++i) h.Take(i, h.nodes[i]->Start(false));
  h.TrainAll();
  // Node 3's models are lost on the way: node 0 waits for it ...
  std::erase_if(h.queue, [](const Envelope& e) { return e.from == 3; });
  h.DeliverAll();
  EXPECT_EQ(h.nodes[0]->rounds_completed(), 0u);
  // ... until the membership says it left.
  h.peers.live_[3] = false;
  h.Take(0, h.nodes[0]->OnPeerLeft(3));
  EXPECT_EQ(h.nodes[0]->rounds_completed(), 1u);
  // Node 0 now has one live neighbour (degree 1), node 1 degree 2: weight 1/3, self keeps 2/3.
  EXPECT_NEAR(h.Value(0), (2 * 0 + 3) / 3.0, 1e-5);
}

TEST(DpsgdTest, TheRoundTimerMergesWhatArrived) {
  Harness h("dpsgd:wait_ms=500", "ring", {Vector({0}), Vector({3}), Vector({6}), Vector({9})});
  for (NodeId i = 0; i < 4; ++i) h.Take(i, h.nodes[i]->Start(false));
  h.TrainAll();
  std::erase_if(h.queue, [](const Envelope& e) { return e.from == 3 && e.to == 0; });  // lost on the way
  h.DeliverAll();
  ASSERT_EQ(h.nodes[0]->rounds_completed(), 0u);
  ASSERT_EQ(h.timers[0].size(), 1u);
  // What the log says when the timer ends the wait: the round, counted from 1, and who is missing.
  EXPECT_EQ(h.nodes[0]->WaitEndedBy(h.timers[0][0]), "round 1: the models of peers 3 (merging without them)");
  h.Take(0, h.nodes[0]->OnTimer(h.timers[0][0]));
  EXPECT_EQ(h.nodes[0]->rounds_completed(), 1u);
  EXPECT_NEAR(h.Value(0), (2 * 0 + 3) / 3.0, 1e-5);  // node 3's third stays with node 0
  EXPECT_EQ(h.nodes[0]->WaitEndedBy(h.timers[0][0]), "");
  h.Take(0, h.nodes[0]->OnTimer(h.timers[0][0]));  // a stale timer does nothing
  EXPECT_EQ(h.nodes[0]->rounds_completed(), 1u);
}

TEST(RoundGossipTest, BadNeighbourModelsAreRefusedNotMerged) {
  Harness h("dpsgd", "ring", {Vector({0, 0}), Vector({3, 3}), Vector({6, 6}), Vector({9, 9})});
  for (NodeId i = 0; i < 4; ++i) h.Take(i, h.nodes[i]->Start(false));
  h.TrainAll();
  auto nan = std::make_shared<const ModelState>(Vector({std::numeric_limits<float>::quiet_NaN(), 1}));
  auto wrong = std::make_shared<const ModelState>(Vector({1, 2, 3}));
  h.Take(0, h.nodes[0]->OnMessage(1, Message{Message::Kind::kModel, 0, nan, 0, 2}));
  h.Take(0, h.nodes[0]->OnMessage(3, Message{Message::Kind::kModel, 0, wrong, 0, 2}));
  h.Take(0, h.nodes[0]->OnMessage(3, Message{Message::Kind::kModel, 0, nullptr, 0, 2}));
  EXPECT_EQ(static_cast<RoundGossip&>(*h.nodes[0]).messages_refused(), 3u);
  EXPECT_EQ(h.nodes[0]->rounds_completed(), 0u);
  h.DeliverAll();  // the honest models complete the round
  EXPECT_NEAR(h.Value(0), 4.0, 1e-5);
  EXPECT_TRUE(h.nodes[0]->model()->CheckFinite().ok());
}

TEST(RoundGossipTest, ARejoiningNodeStartsFromANeighboursModelAndRound) {
  Harness h("el:s=1", "ring", {Vector({0}), Vector({3}), Vector({6}), Vector({9})});
  for (NodeId i = 0; i < 4; ++i) h.Take(i, h.nodes[i]->Start(false));
  for (int r = 0; r < 3; ++r) {  // three rounds without node 0
    h.TrainAll(1.0f);
    h.DeliverAll();
    for (NodeId i = 1; i < 4; ++i) {
      for (uint64_t t : h.timers[i]) h.Take(i, h.nodes[i]->OnTimer(t));
      h.timers[i].clear();
    }
    h.DeliverAll();
    std::erase_if(h.to_train, [](const auto& t) { return t.first == 0; });
  }
  ASSERT_EQ(h.nodes[1]->rounds_completed(), 3u);
  h.Take(0, h.nodes[0]->Leave());
  h.Take(0, h.nodes[0]->Start(true));
  ASSERT_EQ(h.queue.size(), 1u);
  EXPECT_EQ(h.queue.front().message.kind, Message::Kind::kModelRequest);
  const NodeId asked = h.queue.front().to;
  h.DeliverAll();
  EXPECT_EQ(h.nodes[0]->rounds_completed(), h.nodes[asked]->rounds_completed());
  EXPECT_EQ(h.Value(0), h.Value(asked));
  EXPECT_EQ(h.to_train.back().first, 0u);
}

TEST(EpidemicLearningTest, SendsToSPeersAndAveragesWhatArrivedWhenItsTimerFires) {
  std::vector<ModelState> starts;
  for (int i = 0; i < 8; ++i) starts.push_back(Vector({static_cast<float>(i)}));
  Harness h("el:s=3", "complete", std::move(starts));
  for (NodeId i = 0; i < 8; ++i) h.Take(i, h.nodes[i]->Start(false));
  h.TrainAll();
  EXPECT_EQ(h.queue.size(), 8u * 3u);
  std::map<NodeId, std::vector<float>> arrived;
  for (const Envelope& e : h.queue) arrived[e.to].push_back(e.message.model->data()[0]);
  h.DeliverAll();
  for (NodeId i = 0; i < 8; ++i) {
    EXPECT_EQ(h.nodes[i]->rounds_completed(), 0u);  // it cannot know how many will come
    h.Take(i, h.nodes[i]->OnTimer(h.timers[i][0]));
    double sum = i;
    for (float v : arrived[i]) sum += v;
    EXPECT_NEAR(h.Value(i), sum / static_cast<double>(arrived[i].size() + 1), 1e-5);
  }
}

TEST(SemiDecentralizedTest, ServerToAllGivesEveryNodeTheMeanOfTheSampledNodes) {
  Harness h("semidecentralized:every=1,sample=2,mode=s2a", "ring",
            {Vector({0}), Vector({4}), Vector({8}), Vector({12})});
  for (NodeId i = 0; i < 4; ++i) h.Take(i, h.nodes[i]->Start(false));
  h.TrainAll();
  // Gossip first; then the two sampled nodes upload their merged models and everyone waits.
  std::vector<Envelope> uploads = h.DeliverAllExceptTo(4);
  ASSERT_EQ(uploads.size(), 2u);
  EXPECT_TRUE(h.to_train.empty());  // nobody trains before the server answers
  const float mean = (uploads[0].message.model->data()[0] + uploads[1].message.model->data()[0]) / 2;
  for (Envelope& e : uploads) h.Take(4, h.nodes[4]->OnMessage(e.from, e.message));
  h.DeliverAll();
  for (NodeId i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(h.Value(i), mean) << i;
  EXPECT_EQ(h.to_train.size(), 4u);
}

TEST(SemiDecentralizedTest, ServerToSampledLeavesTheOthersTrainingOnAndATimerEndsAWait) {
  Harness h("semidecentralized:every=1,sample=1,mode=s2s,wait_ms=100", "ring",
            {Vector({0}), Vector({4}), Vector({8}), Vector({12})});
  for (NodeId i = 0; i < 4; ++i) h.Take(i, h.nodes[i]->Start(false));
  h.TrainAll();
  std::vector<Envelope> uploads = h.DeliverAllExceptTo(4);
  ASSERT_EQ(uploads.size(), 1u);
  EXPECT_EQ(h.to_train.size(), 3u);  // the three others go on at once
  // The upload is lost: the sampled node's timer ends its wait.
  const NodeId sampled = uploads[0].from;
  const uint64_t timer = h.timers[sampled].back();
  EXPECT_EQ(h.nodes[sampled]->WaitEndedBy(timer), "round 1: the server's model (going on with its own)");
  h.Take(sampled, h.nodes[sampled]->OnTimer(timer));
  EXPECT_EQ(h.to_train.size(), 4u);
}

TEST(GossipRegistryTest, BadSpecsNameTheirFlag) {
  auto message = [](const std::string& gossip, const std::string& merge) {
    auto f = MakeGossip(gossip, merge);
    EXPECT_FALSE(f.ok());
    return f.ok() ? std::string() : f.status().message();
  };
  EXPECT_NE(message("flood", "mean").find("--gossip: unknown algorithm 'flood'"), std::string::npos);
  EXPECT_NE(message("el:s=0", "mean").find("--gossip"), std::string::npos);
  EXPECT_NE(message("el:t=3", "mean").find("--gossip"), std::string::npos);
  EXPECT_NE(message("el", "average").find("--merge"), std::string::npos);
  EXPECT_NE(message("pushsum", "median").find("--merge: pushsum mixes by weights only"), std::string::npos);
  EXPECT_NE(message("dpsgd", "balance:gamma=0").find("--merge"), std::string::npos);
  EXPECT_NE(message("semidecentralized:mode=s2x", "mean").find("--gossip: semidecentralized:mode is s2s or s2a"),
            std::string::npos);
}

// Push-sum's invariant: no mass is lost or counted twice, whatever the network does. Messages
// are delivered in any order, duplicated or dropped; once the last message of every link has
// arrived, the weights sum to N and the numerators to the sum of the starting models.
RC_GTEST_PROP(PushSumProperty, ConservesMassUnderDropsDuplicatesAndReordering, ()) {
  const size_t n = *rc::gen::inRange<size_t>(2, 9);
  const std::string topology = *rc::gen::element<std::string>("exponential", "onepeer-exponential", "complete");
  std::vector<ModelState> starts;
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const auto v = static_cast<float>(*rc::gen::inRange(-64, 64));
    starts.push_back(Vector({v}));
    total += v;
  }
  Harness h("pushsum", topology, std::move(starts));
  for (NodeId i = 0; i < n; ++i) h.Take(i, h.nodes[i]->Start(false));
  std::map<std::pair<NodeId, NodeId>, Envelope> newest;  // per link: what it carried last
  auto note = [&newest](const Envelope& e) {
    auto it = newest.find({e.from, e.to});
    if (it == newest.end() || it->second.message.weight < e.message.weight) newest.insert_or_assign({e.from, e.to}, e);
  };
  const int steps = *rc::gen::inRange(1, 60);
  for (int s = 0; s < steps; ++s) {
    h.TrainAll();  // no local steps: only mixing
    for (const Envelope& e : h.queue) note(e);
    if (h.queue.empty()) continue;
    const size_t pick = *rc::gen::inRange<size_t>(0, h.queue.size());
    Envelope e = h.queue[pick];
    switch (*rc::gen::inRange(0, 3)) {
      case 0:  // drop
        h.queue.erase(h.queue.begin() + static_cast<std::ptrdiff_t>(pick));
        break;
      case 1:  // duplicate: deliver now and leave it queued
        h.Take(e.to, h.nodes[e.to]->OnMessage(e.from, e.message));
        break;
      default:  // deliver out of order
        h.queue.erase(h.queue.begin() + static_cast<std::ptrdiff_t>(pick));
        h.Take(e.to, h.nodes[e.to]->OnMessage(e.from, e.message));
    }
    for (const Envelope& q : h.queue) note(q);
  }
  h.queue.clear();
  for (auto& [link, e] : newest) h.Take(e.to, h.nodes[e.to]->OnMessage(e.from, e.message));  // the last of each link
  double y = 0.0, w = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const auto& node = dynamic_cast<const PushSum&>(*h.nodes[i]);
    y += node.numerator().data()[0];
    w += node.weight();
  }
  RC_ASSERT(std::abs(w - static_cast<double>(n)) < 1e-9);
  RC_ASSERT(std::abs(y - total) < 1e-3);
}

TEST(PushSumTest, ALeavingNodeHandsOverItsMassAndAJoiningNodeGetsHalfOfANeighbours) {
  Harness h("pushsum", "complete", {Vector({2}), Vector({4}), Vector({6})});
  for (NodeId i = 0; i < 3; ++i) h.Take(i, h.nodes[i]->Start(false));
  h.TrainAll();
  h.DeliverAll();
  h.Take(2, h.nodes[2]->Leave());
  h.peers.live_[2] = false;
  h.DeliverAll();
  auto& a = dynamic_cast<const PushSum&>(*h.nodes[0]);
  auto& b = dynamic_cast<const PushSum&>(*h.nodes[1]);
  auto& c = dynamic_cast<const PushSum&>(*h.nodes[2]);
  EXPECT_EQ(c.weight(), 0.0);
  EXPECT_NEAR(a.weight() + b.weight(), 3.0, 1e-12);
  EXPECT_NEAR(a.numerator().data()[0] + b.numerator().data()[0], 12.0, 1e-4);
  h.peers.live_[2] = true;
  h.Take(2, h.nodes[2]->Start(true));
  h.DeliverAll();
  EXPECT_GT(c.weight(), 0.0);
  EXPECT_NEAR(a.weight() + b.weight() + c.weight(), 3.0, 1e-12);
  EXPECT_NEAR(h.Value(2), 4.0, 1e-4);  // the estimate it got is a neighbour's, near the mean
}

}  // namespace
}  // namespace plexus::gossip
