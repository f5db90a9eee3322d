#include "gossip/node/membership.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

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

}  // namespace
}  // namespace plexus::gossip
