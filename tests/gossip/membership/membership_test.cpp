#include "gossip/membership/membership.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace plexus::gossip {
namespace {

using Probe = Membership::Probe;

MembershipOptions Options() {
  MembershipOptions o;
  o.period_ms = 1000;
  o.ack_timeout_ms = 400;
  o.indirect = 2;
  o.suspicion_ms = 3000;
  return o;
}

// A node that knows peers 1..n-1 (alive at incarnation 1).
Membership Node(NodeId self, size_t n) {
  Membership m(self, "127.0.0.1:" + std::to_string(7000 + self), 1, Options(), 42);
  Membership::Changes changes;
  for (NodeId i = 0; i < n; ++i) {
    if (i != self) m.Apply({i, "127.0.0.1:" + std::to_string(7000 + i), 1, MemberState::kAlive}, 0, &changes);
  }
  return m;
}

TEST(Membership, NewMembersJoinOnceAndAreLive) {
  Membership m(0, "a:1", 1, Options(), 1);
  Membership::Changes changes;
  m.Apply({3, "a:4", 1, MemberState::kAlive}, 0, &changes);
  m.Apply({3, "a:4", 1, MemberState::kAlive}, 0, &changes);
  EXPECT_EQ(changes.joined, std::vector<NodeId>{3});
  EXPECT_TRUE(m.IsLive(3));
  EXPECT_EQ(m.address_of(3), "a:4");
  EXPECT_FALSE(m.IsLive(5));
}

TEST(Membership, ProbesEveryMemberWithinTwoPeriods) {
  Membership m = Node(0, 6);
  std::vector<NodeId> pinged;
  double now = 0;
  for (int period = 0; period < 10; ++period, now += 1000) {
    std::vector<Probe> out;
    Membership::Changes changes;
    m.Tick(now, &out, &changes);
    ASSERT_EQ(out.size(), 1u);
    ASSERT_EQ(out[0].kind, Probe::Kind::kPing);
    pinged.push_back(out[0].to);
    m.OnAck(out[0].to, out[0].target, out[0].seq, now + 10, &out, &changes);
    EXPECT_TRUE(changes.left.empty());
  }
  // Round-robin over a shuffled order: the first five probes cover all five peers.
  std::vector<NodeId> first(pinged.begin(), pinged.begin() + 5);
  std::sort(first.begin(), first.end());
  EXPECT_EQ(first, (std::vector<NodeId>{1, 2, 3, 4, 5}));
}

TEST(Membership, SilentPeerIsPingedIndirectlyThenSuspectedThenDead) {
  Membership m = Node(0, 4);
  std::vector<Probe> out;
  Membership::Changes changes;
  m.Tick(0, &out, &changes);
  ASSERT_EQ(out.size(), 1u);
  const NodeId target = out[0].to;
  out.clear();
  m.Tick(450, &out, &changes);  // past the ack timeout: k = 2 indirect pings through the others
  ASSERT_EQ(out.size(), 2u);
  for (const Probe& p : out) {
    EXPECT_EQ(p.kind, Probe::Kind::kPingRequest);
    EXPECT_EQ(p.target, target);
    EXPECT_NE(p.to, target);
  }
  out.clear();
  m.Tick(1000, &out, &changes);  // end of the period: suspected, still a member
  EXPECT_EQ(m.members().at(target).state, MemberState::kSuspect);
  EXPECT_TRUE(m.IsLive(target));
  EXPECT_TRUE(changes.left.empty());
  // Nobody refutes: dead after the suspicion timeout.
  for (double t = 1100; t < 4100; t += 100) {
    out.clear();
    m.Tick(t, &out, &changes);
    // Acks of the other probes keep the rest alive.
    for (const Probe& p : out) {
      if (p.kind == Probe::Kind::kPing && p.to != target) m.OnAck(p.to, p.target, p.seq, t, &out, &changes);
    }
  }
  EXPECT_EQ(m.members().at(target).state, MemberState::kDead);
  EXPECT_EQ(changes.left, std::vector<NodeId>{target});
  EXPECT_FALSE(m.IsLive(target));
}

TEST(Membership, AnIndirectAckThroughAHelperClearsTheProbe) {
  Membership a = Node(0, 3);
  Membership helper = Node(1, 3);
  std::vector<Probe> out;
  Membership::Changes changes;
  a.Tick(0, &out, &changes);
  const NodeId target = out[0].to;
  const NodeId via = target == 1 ? 2 : 1;
  Membership h = Node(via, 3);
  out.clear();
  a.Tick(450, &out, &changes);
  ASSERT_EQ(out.size(), 1u);  // only one other member to ask
  // The helper pings the target on a's behalf, the target acks, the helper relays the ack to a.
  std::vector<Probe> hout;
  h.OnPing(0, target, out[0].seq, 450, &hout);
  ASSERT_EQ(hout.size(), 1u);
  EXPECT_EQ(hout[0].to, target);
  std::vector<Probe> relayed;
  h.OnAck(target, target, hout[0].seq, 460, &relayed, &changes);
  ASSERT_EQ(relayed.size(), 1u);
  EXPECT_EQ(relayed[0].kind, Probe::Kind::kAck);
  EXPECT_EQ(relayed[0].to, 0u);
  a.OnAck(via, relayed[0].target, relayed[0].seq, 470, &out, &changes);
  out.clear();
  a.Tick(1000, &out, &changes);
  EXPECT_EQ(a.members().at(target).state, MemberState::kAlive);
  (void)helper;
}

TEST(Membership, ASuspectedNodeRefutesWithAHigherIncarnation) {
  Membership m(2, "a:3", 5, Options(), 1);
  Membership::Changes changes;
  m.Apply({2, "a:3", 5, MemberState::kSuspect}, 0, &changes);
  EXPECT_EQ(m.incarnation(), 6u);
  std::vector<MemberUpdate> gossip = m.Piggyback();
  auto self = std::find_if(gossip.begin(), gossip.end(), [](const MemberUpdate& u) { return u.node == 2; });
  ASSERT_NE(self, gossip.end());
  EXPECT_EQ(self->state, MemberState::kAlive);
  EXPECT_EQ(self->incarnation, 6u);

  // Elsewhere, the refutation overrides the suspicion; an older suspicion cannot undo it.
  Membership other(0, "a:1", 1, Options(), 1);
  other.Apply({2, "a:3", 5, MemberState::kAlive}, 0, &changes);
  other.Apply({2, "a:3", 5, MemberState::kSuspect}, 1, &changes);
  EXPECT_EQ(other.members().at(2).state, MemberState::kSuspect);
  other.Apply({2, "a:3", 6, MemberState::kAlive}, 2, &changes);
  EXPECT_EQ(other.members().at(2).state, MemberState::kAlive);
  other.Apply({2, "a:3", 5, MemberState::kSuspect}, 3, &changes);
  EXPECT_EQ(other.members().at(2).state, MemberState::kAlive);
}

// A "dead" rumour about this node at incarnation 2^64-1 wrapped its refutation to 0: every
// later rumour overrode it and the node was evicted for good. Absurd incarnations are refused,
// about this node and about others; a high but real one is still refuted without wrapping.
TEST(Membership, RumoursWithAbsurdIncarnationsAreRefusedAndRefutationsNeverWrap) {
  Membership m(2, "a:3", 5, Options(), 1);
  Membership::Changes changes;
  EXPECT_FALSE(m.Apply({2, "a:3", UINT64_MAX, MemberState::kDead}, 0, &changes));
  EXPECT_EQ(m.incarnation(), 5u);
  EXPECT_FALSE(m.Apply({2, "a:3", Membership::kMaxIncarnation, MemberState::kDead}, 0, &changes));
  EXPECT_EQ(m.incarnation(), 5u);
  EXPECT_FALSE(m.Apply({2, "a:3", Membership::kMaxIncarnation - 1, MemberState::kDead}, 0, &changes));
  EXPECT_TRUE(m.Apply({2, "a:3", Membership::kMaxIncarnation - 2, MemberState::kDead}, 0, &changes));
  EXPECT_EQ(m.incarnation(), Membership::kMaxIncarnation - 1);  // a refutation others still take
  Membership other(0, "a:1", 1, Options(), 1);
  EXPECT_TRUE(other.Apply({2, "a:3", m.incarnation(), MemberState::kAlive}, 0, &changes));
  EXPECT_GT(m.incarnation(), 5u);

  // About another node: an absurd "dead" cannot pin it, and its next alive still counts.
  EXPECT_TRUE(m.Apply({4, "a:5", 7, MemberState::kAlive}, 0, &changes));
  EXPECT_FALSE(m.Apply({4, "a:5", UINT64_MAX, MemberState::kDead}, 1, &changes));
  EXPECT_TRUE(m.IsLive(4));
  EXPECT_EQ(m.members().at(4).incarnation, 7u);
  EXPECT_TRUE(changes.left.empty());
}

TEST(Membership, ADeadNodeComesBackOnlyWithAHigherIncarnation) {
  Membership m(0, "a:1", 1, Options(), 1);
  Membership::Changes changes;
  m.Apply({4, "a:5", 7, MemberState::kAlive}, 0, &changes);
  m.Apply({4, "a:5", 7, MemberState::kDead}, 1, &changes);
  EXPECT_EQ(changes.left, std::vector<NodeId>{4});
  m.Apply({4, "a:5", 7, MemberState::kAlive}, 2, &changes);
  EXPECT_FALSE(m.IsLive(4));
  m.Apply({4, "a:5", 8, MemberState::kAlive}, 3, &changes);  // restarted
  EXPECT_TRUE(m.IsLive(4));
  EXPECT_EQ(changes.joined, (std::vector<NodeId>{4, 4}));
}

TEST(Membership, UpdatesArePiggybackedABoundedNumberOfTimes) {
  MembershipOptions o = Options();
  o.retransmissions = 3;
  o.max_piggyback = 2;
  Membership m(0, "a:1", 1, o, 1);
  Membership::Changes changes;
  for (NodeId i = 1; i <= 3; ++i) m.Apply({i, "a", 1, MemberState::kAlive}, 0, &changes);
  size_t total = 0;
  for (int i = 0; i < 20; ++i) {
    const size_t n = m.Piggyback().size();
    EXPECT_LE(n, 2u);
    total += n;
  }
  EXPECT_EQ(total, 4u * 3u);  // self plus three members, three times each
  EXPECT_TRUE(m.Piggyback().empty());
}

// Memberships talking through a lossy network in one process: every probe carries the sender's
// piggybacked rumours and arrives 5 ms later unless `cut` separates the two ends.
class World {
 public:
  World(size_t n, MembershipOptions o) {
    for (NodeId i = 0; i < n; ++i) nodes_.emplace_back(i, "n" + std::to_string(i), 1, o, 7);
    Membership::Changes changes;
    for (NodeId i = 0; i < n; ++i) {
      for (NodeId j = 0; j < n; ++j) {
        if (i != j) nodes_[i].Apply({j, "n" + std::to_string(j), 1, MemberState::kAlive}, 0, &changes);
      }
    }
  }
  // Runs until `until_ms` in 100 ms ticks (the peer's), delivering probes as they come.
  void RunUntil(double until_ms) {
    for (; now_ < until_ms; now_ += 100) {
      for (NodeId i = 0; i < nodes_.size(); ++i) {
        std::vector<Probe> out;
        Membership::Changes changes;
        nodes_[i].Tick(now_, &out, &changes);
        Send(i, out);
      }
    }
  }
  MemberState StateAt(NodeId viewer, NodeId node) const { return nodes_[viewer].members().at(node).state; }
  const Membership& node(NodeId i) const { return nodes_[i]; }
  std::function<bool(NodeId, NodeId)> cut = [](NodeId, NodeId) { return false; };

 private:
  void Send(NodeId from, const std::vector<Probe>& probes) {
    for (const Probe& p : probes) {
      if (cut(from, p.to)) continue;
      const std::vector<MemberUpdate> rumours = nodes_[from].Piggyback();
      Membership& to = nodes_[p.to];
      Membership::Changes changes;
      for (const MemberUpdate& u : rumours) to.Apply(u, now_, &changes);
      std::vector<Probe> out;
      if (p.kind == Probe::Kind::kAck) {
        to.OnAck(from, p.target, p.seq, now_, &out, &changes);
      } else {
        to.OnPing(from, p.target, p.seq, now_, &out);
      }
      Send(p.to, out);
    }
  }
  std::vector<Membership> nodes_;
  double now_ = 0;
};

// Two halves of a partition hold each other dead; once it heals, a reconnect ping carries the
// word of a member's death to it, it refutes, and its ack brings it back. Without reconnect
// pings the halves stay apart for good (what the peers once did).
TEST(Membership, TheHalvesOfAHealedPartitionFindEachOtherAgain) {
  for (const uint32_t reconnect : {5u, 0u}) {
    MembershipOptions o = Options();
    o.reconnect_periods = reconnect;
    World w(4, o);
    auto half = [](NodeId i) { return i < 2; };
    w.cut = [&](NodeId a, NodeId b) { return half(a) != half(b); };
    w.RunUntil(20000);
    for (NodeId i = 0; i < 4; ++i) {
      for (NodeId j = 0; j < 4; ++j) {
        if (i == j) continue;
        EXPECT_EQ(w.StateAt(i, j), half(i) == half(j) ? MemberState::kAlive : MemberState::kDead)
            << "node " << i << " about " << j << " during the partition";
      }
    }
    w.cut = [](NodeId, NodeId) { return false; };
    w.RunUntil(60000);
    size_t alive = 0;
    for (NodeId i = 0; i < 4; ++i) {
      for (NodeId j = 0; j < 4; ++j) alive += i != j && w.StateAt(i, j) == MemberState::kAlive;
    }
    uint64_t suspicions = 0, deaths = 0, refutations = 0, reconnects = 0;
    for (NodeId i = 0; i < 4; ++i) {
      suspicions += w.node(i).counters().suspicions;
      deaths += w.node(i).counters().deaths;
      refutations += w.node(i).counters().refutations;
      reconnects += w.node(i).counters().reconnect_pings;
    }
    EXPECT_GT(suspicions, 0u);
    EXPECT_GT(deaths, 0u);
    if (reconnect > 0) {
      EXPECT_EQ(alive, 12u) << "after the heal, with reconnect pings";
      EXPECT_GT(refutations, 0u);
      EXPECT_GT(reconnects, 0u);
    } else {
      EXPECT_EQ(alive, 4u) << "without reconnect pings only each half's own members are alive";
      EXPECT_EQ(reconnects, 0u);
    }
  }
}

}  // namespace
}  // namespace plexus::gossip
