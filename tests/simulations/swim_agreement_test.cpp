// The simulator's SWIM (SwimDriver over the EventNetwork, as `plexus sim --mode gossip` runs it)
// and real peers' SWIM (three PeerNodes on 127.0.0.1, each on its own libuv loop) put through the
// same events reach the same verdicts: after node 2 crashes (killed: links cut, no goodbye) both
// others hold it dead and each other alive; after it comes back (a new process, a higher
// incarnation) all three hold everyone alive. Both read what the memberships report
// (Membership::Snapshot), never logs; the real side waits on the peers' progress callbacks, the
// simulated side runs virtual time. A change to the membership or to either driver that makes
// one world reach another verdict fails here.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gossip/node/peer_node.h"
#include "gossip/protocol/registry.h"
#include "gossip/protocol/topology.h"
#include "simulations/event_network.h"
#include "simulations/swim_driver.h"
#include "tests/integration/process.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/vector_model.h"

namespace plexus {
namespace {

using gossip::MemberState;
using gossip::MemberUpdate;
using gossip::NodeId;

constexpr size_t kNodes = 3;
constexpr NodeId kVictim = 2;

// What one node holds of each other node (itself left out), and at which incarnation.
struct View {
  std::map<NodeId, MemberState> state;
  std::map<NodeId, uint64_t> incarnation;
};

View ViewOf(NodeId self, const std::vector<MemberUpdate>& members) {
  View v;
  for (const MemberUpdate& u : members) {
    if (u.node == self) continue;
    v.state[u.node] = u.state;
    v.incarnation[u.node] = u.incarnation;
  }
  return v;
}

bool Holds(const View& v, NodeId node, MemberState state) {
  auto it = v.state.find(node);
  return it != v.state.end() && it->second == state;
}

bool AllAlive(NodeId self, const View& v) {
  for (NodeId j = 0; j < kNodes; ++j) {
    if (j != self && !Holds(v, j, MemberState::kAlive)) return false;
  }
  return true;
}

// The verdicts the test compares: observer -> (node -> state).
using Verdict = std::map<NodeId, std::map<NodeId, MemberState>>;

std::string Describe(const Verdict& v) {
  std::string out;
  for (const auto& [observer, states] : v) {
    out += "node " + std::to_string(observer) + ":";
    for (const auto& [node, state] : states) out += " " + std::to_string(node) + "=" + gossip::MemberStateName(state);
    out += "; ";
  }
  return out;
}

// ---- the simulated world ------------------------------------------------------------------------

class SimulatedWorld {
 public:
  SimulatedWorld() : topology_(*gossip::Topology::Parse("complete", kNodes, 1)) {
    for (size_t i = 0; i < kNodes; ++i) net_.AddNode({1.0, 0.0, 0.0});
    swim_ = std::make_unique<SwimDriver>(kNodes, &topology_, &net_, 7,
                                         SwimDriver::Hooks{[this](NodeId i) { return live_[i]; },
                                                           [](NodeId, const gossip::Membership::Changes&) {}, [] {}});
    for (NodeId i = 0; i < kNodes; ++i) ScheduleTick(i);
  }

  View ViewAt(NodeId i) const { return ViewOf(i, swim_->Snapshot(i)); }
  void Crash(NodeId i) {
    live_[i] = false;
    ++life_[i];  // its pending ticks die with it
  }
  void Restart(NodeId i) {
    live_[i] = true;
    swim_->Restart(i);
    ScheduleTick(i);
  }
  // Runs virtual time in steps of a tick until `done` holds; false if a minute passes first.
  bool RunUntil(const std::function<bool()>& done) {
    const double give_up = net_.now_ms() + 60'000;
    while (!done()) {
      if (net_.now_ms() >= give_up) return false;
      net_.Run(net_.now_ms() + 100);
    }
    return true;
  }

 private:
  void ScheduleTick(NodeId i) {
    net_.After(100, [this, i, life = life_[i]] {
      if (!live_[i] || life != life_[i]) return;
      swim_->Tick(i);
      ScheduleTick(i);
    });
  }

  gossip::Topology topology_;
  EventNetwork net_;
  std::unique_ptr<SwimDriver> swim_;
  std::array<bool, kNodes> live_{true, true, true};
  std::array<int, kNodes> life_{};
};

// ---- the real world -----------------------------------------------------------------------------

// Trains round 0 at once and holds every later round until the test ends (Release): the peers
// stay in their second round, exchanging nothing but membership, however fast the machine.
class HeldTrainer final : public gossip::PeerTrainer {
 public:
  HeldTrainer() : gate_(opened_.get_future().share()) {}
  Result<ModelState> Train(const ModelState& start, uint64_t round) override {
    // A guard against a hang, not a synchronization: the test releases the gate when it is done.
    if (round >= 1 && gate_.wait_for(std::chrono::seconds(120)) != std::future_status::ready) {
      return DeadlineExceededError("gate");
    }
    return ModelState(start);
  }
  Result<double> Evaluate(const ModelState&) override { return 0.5; }
  void Release() {
    if (!released_.exchange(true)) opened_.set_value();
  }

 private:
  std::atomic<bool> released_{false};
  std::promise<void> opened_;
  std::shared_future<void> gate_;
};

class RealWorld {
 public:
  RealWorld() {
    Result<std::unique_ptr<gossip::ProtocolFactory>> f = gossip::MakeGossip("dpsgd", "mean");
    EXPECT_OK(f.status());
    factory_ = std::move(f).value();
    for (NodeId i = 0; i < kNodes; ++i) address_[i] = "127.0.0.1:" + std::to_string(testing::FreePort());
  }
  ~RealWorld() {
    trainer_.Release();
    for (auto& s : stop_) s->store(true);
    for (std::thread& t : threads_) t.join();
  }

  // Starts a process-like node i (again, after a kill: a new node, as a restarted process).
  void Start(NodeId i) {
    gossip::PeerNodeOptions o;
    o.self = i;
    o.nodes = kNodes;
    o.listen = address_[i];
    for (NodeId j = 0; j < kNodes; ++j) {
      if (j != i) o.seeds.push_back(address_[j]);
    }
    o.rounds = 1000;
    o.topology = "complete";
    o.run = "swim-agreement-test";
    o.linger_ms = 0;
    o.eval_every = 0;
    o.inbound_budget = 4 << 20;
    auto node =
        std::make_shared<gossip::PeerNode>(o, factory_.get(), testing::VectorModel({0, 0, 0, 0}), &trainer_, nullptr);
    stop_.push_back(std::make_unique<std::atomic<bool>>(false));
    const std::atomic<bool>* stop = stop_.back().get();
    {
      std::lock_guard<std::mutex> lock(mu_);
      nodes_[i] = node;
      views_.erase(i);
    }
    threads_.emplace_back([this, i, node, stop] {
      Result<gossip::PeerNodeStats> r = node->Run(stop, [this, i, node](const gossip::PeerNodeStats& s) {
        std::lock_guard<std::mutex> lock(mu_);
        if (nodes_[i] != node) return;  // a killed node's last words
        views_[i] = ViewOf(i, s.members);
        changed_.notify_all();
      });
      EXPECT_OK(r.status()) << "node " << i;
    });
  }
  void Kill(NodeId i) {
    std::lock_guard<std::mutex> lock(mu_);
    nodes_[i]->Kill();
    nodes_[i].reset();
    views_.erase(i);
  }
  // Waits for the nodes' reports until `done` holds of their latest views; false after a minute
  // (a guard against a hang: every wait ends on a report).
  bool WaitUntil(const std::function<bool(const std::map<NodeId, View>&)>& done) {
    std::unique_lock<std::mutex> lock(mu_);
    return changed_.wait_for(lock, std::chrono::seconds(60), [&] { return done(views_); });
  }
  std::map<NodeId, View> views() {
    std::lock_guard<std::mutex> lock(mu_);
    return views_;
  }

 private:
  std::unique_ptr<gossip::ProtocolFactory> factory_;
  HeldTrainer trainer_;
  std::array<std::string, kNodes> address_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::array<std::shared_ptr<gossip::PeerNode>, kNodes> nodes_;  // guarded by mu_
  std::map<NodeId, View> views_;                                 // guarded by mu_: the latest report
  std::vector<std::unique_ptr<std::atomic<bool>>> stop_;
  std::vector<std::thread> threads_;
};

Verdict VerdictOf(const std::map<NodeId, View>& views, const std::vector<NodeId>& observers) {
  Verdict v;
  for (NodeId o : observers) {
    auto it = views.find(o);
    if (it != views.end()) v[o] = it->second.state;
  }
  return v;
}

bool VictimDeadToBoth(const std::map<NodeId, View>& views) {
  for (NodeId o : {NodeId{0}, NodeId{1}}) {
    auto it = views.find(o);
    if (it == views.end() || !Holds(it->second, kVictim, MemberState::kDead)) return false;
  }
  return true;
}

bool EveryoneAliveToAll(const std::map<NodeId, View>& views) {
  for (NodeId o = 0; o < kNodes; ++o) {
    auto it = views.find(o);
    if (it == views.end() || !AllAlive(o, it->second)) return false;
  }
  return true;
}

TEST(SwimAgreementTest, SimulatorAndRealPeersHoldTheSameNodesAliveAfterACrashAndARestart) {
  // The simulated world.
  SimulatedWorld sim;
  auto sim_views = [&] {
    std::map<NodeId, View> v;
    for (NodeId i = 0; i < kNodes; ++i) v[i] = sim.ViewAt(i);
    return v;
  };
  ASSERT_TRUE(sim.RunUntil([&] { return EveryoneAliveToAll(sim_views()); }));
  const uint64_t sim_incarnation_before = sim.ViewAt(0).incarnation.at(kVictim);
  sim.Crash(kVictim);
  ASSERT_TRUE(sim.RunUntil([&] { return VictimDeadToBoth(sim_views()); })) << "the simulator never buried node 2";
  const Verdict sim_after_crash = VerdictOf(sim_views(), {0, 1});
  sim.Restart(kVictim);
  ASSERT_TRUE(sim.RunUntil([&] { return EveryoneAliveToAll(sim_views()); })) << "node 2 never came back (sim)";
  const Verdict sim_after_restart = VerdictOf(sim_views(), {0, 1, 2});
  EXPECT_GT(sim.ViewAt(0).incarnation.at(kVictim), sim_incarnation_before);

  // The real world, the same events.
  RealWorld real;
  for (NodeId i = 0; i < kNodes; ++i) real.Start(i);
  ASSERT_TRUE(real.WaitUntil(EveryoneAliveToAll)) << "the peers never all met";
  const uint64_t real_incarnation_before = real.views().at(0).incarnation.at(kVictim);
  real.Kill(kVictim);
  ASSERT_TRUE(real.WaitUntil(VictimDeadToBoth)) << "the peers never buried node 2";
  const Verdict real_after_crash = VerdictOf(real.views(), {0, 1});
  real.Start(kVictim);
  ASSERT_TRUE(real.WaitUntil(EveryoneAliveToAll)) << "node 2 never came back (real)";
  const Verdict real_after_restart = VerdictOf(real.views(), {0, 1, 2});
  EXPECT_GT(real.views().at(0).incarnation.at(kVictim), real_incarnation_before);

  EXPECT_EQ(sim_after_crash, real_after_crash)
      << "sim: " << Describe(sim_after_crash) << "\nreal: " << Describe(real_after_crash);
  EXPECT_EQ(sim_after_restart, real_after_restart)
      << "sim: " << Describe(sim_after_restart) << "\nreal: " << Describe(real_after_restart);
  // And what both say: the survivors hold each other alive and the crashed node dead.
  const Verdict expected_after_crash = {{0, {{1, MemberState::kAlive}, {2, MemberState::kDead}}},
                                        {1, {{0, MemberState::kAlive}, {2, MemberState::kDead}}}};
  EXPECT_EQ(sim_after_crash, expected_after_crash) << Describe(sim_after_crash);
}

}  // namespace
}  // namespace plexus
