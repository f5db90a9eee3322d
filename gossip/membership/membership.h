// Membership: who is in a decentralized federation and who is alive, by SWIM (Das, Gupta,
// Motivala 2002), as a pure state machine. Every protocol period the node pings one member (in a
// shuffled round-robin order, so every member is probed within two periods); no ack within the
// ack timeout -> it asks k other members to ping the target for it (indirect ping); still no ack
// by the end of the period -> the target is suspected. A suspect that does not refute within the
// suspicion timeout is declared dead. A member refutes a suspicion of itself by raising its
// incarnation number; updates (alive, suspect, dead, left, each with an incarnation) travel
// piggybacked on the node's messages, each a bounded number of times. Every few periods the node
// also pings one member it holds dead (not one that left), carrying the word of its death: a
// member cut off by a partition, or buried while it was only slow, refutes it and comes back
// (without this, the two sides of a healed partition would hold each other dead for good).
//
// It does nothing itself: the driver (the networked peer, gossip/node/peer_node.h, or the gossip
// simulator, simulations/gossip_sim.h) feeds it what it heard and the time, sends the probes it
// asks for and reports membership changes to the gossip protocol.
// Time is milliseconds on any monotonic clock the driver chooses (a manual one in tests).
// Single-threaded.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/rng.h"
#include "gossip/protocol/protocol.h"

namespace plexus::gossip {

enum class MemberState : uint8_t { kAlive = 0, kSuspect = 1, kDead = 2, kLeft = 3 };
const char* MemberStateName(MemberState s);

// What one node says of another: travels on the wire (proto MemberUpdate).
struct MemberUpdate {
  NodeId node = 0;
  std::string address;  // HOST:PORT the node listens on
  uint64_t incarnation = 0;
  MemberState state = MemberState::kAlive;
};

struct MembershipOptions {
  double period_ms = 1000;         // one probe per period
  double ack_timeout_ms = 400;     // then indirect pings
  size_t indirect = 2;             // k: members asked to ping a silent target
  double suspicion_ms = 5000;      // a suspect not heard from in this long is dead
  uint32_t retransmissions = 6;    // times each update is piggybacked (grows with log n)
  size_t max_piggyback = 8;        // updates per message
  uint32_t reconnect_periods = 5;  // every this many periods, a ping to one dead member; 0: never
};

class Membership {
 public:
  struct Member {
    std::string address;
    uint64_t incarnation = 0;
    MemberState state = MemberState::kAlive;
    double since_ms = 0;  // when it entered its state
  };
  // A message the driver sends for membership.
  struct Probe {
    enum class Kind { kPing, kPingRequest, kAck } kind;
    NodeId to;
    NodeId target;  // the node whose liveness is asked about (the receiver for a direct ping)
    uint64_t seq;
  };
  // Members that became live (joined, rejoined) or stopped being live (dead, left) in one call.
  struct Changes {
    std::vector<NodeId> joined, left;
  };
  // What this node itself did, since it was made.
  struct Counters {
    uint64_t suspicions = 0;       // members it suspected (no ack within a period)
    uint64_t deaths = 0;           // suspects it declared dead (no refutation within suspicion_ms)
    uint64_t refutations = 0;      // rumours of its own suspicion or death it refuted
    uint64_t reconnect_pings = 0;  // pings to members it held dead
  };

  // `incarnation` should grow across restarts of the same node (the driver uses its stored value
  // plus one, or the wall clock), so a restarted node overrides its own death.
  Membership(NodeId self, std::string address, uint64_t incarnation, MembershipOptions options, uint64_t seed);

  // No real incarnation comes near this: drivers start from the wall clock in milliseconds
  // (about 2^41 today) and add one per refutation. A rumour at or above it is refused: a "dead"
  // about this node at 2^64-1 once wrapped its refutation to 0 and evicted it for good, and one
  // about another node would pin that node's state beyond any refutation.
  static constexpr uint64_t kMaxIncarnation = uint64_t{1} << 62;

  // An update heard from anyone (piggybacked, or in a hello). Applies SWIM's precedence rules.
  // Returns false, changing nothing, for an incarnation of kMaxIncarnation or more (about this
  // node, kMaxIncarnation - 1 or more: its refutation adds one).
  bool Apply(const MemberUpdate& update, double now_ms, Changes* changes);
  // Advances time: starts the next probe, sends indirect pings, suspects and buries.
  void Tick(double now_ms, std::vector<Probe>* out, Changes* changes);
  // A ping from `from` about `target` (this node: answer; another: ping it for `from`).
  void OnPing(NodeId from, NodeId target, uint64_t seq, double now_ms, std::vector<Probe>* out);
  // An ack from `from` for probe `seq` about `target` (relayed to whoever asked for it).
  void OnAck(NodeId from, NodeId target, uint64_t seq, double now_ms, std::vector<Probe>* out, Changes* changes);
  // The node leaves: an update saying so, to send to everyone.
  MemberUpdate Leave();

  // Up to max_piggyback updates to attach to an outgoing message (each counts a transmission).
  std::vector<MemberUpdate> Piggyback();
  // Every member with its state, for a joining node's hello reply and for the store.
  std::vector<MemberUpdate> Snapshot() const;

  bool IsLive(NodeId node) const;           // alive or suspect (a suspect is still a member)
  std::vector<NodeId> LiveMembers() const;  // excluding self
  const std::map<NodeId, Member>& members() const { return members_; }
  NodeId self() const { return self_; }
  uint64_t incarnation() const { return incarnation_; }
  const Counters& counters() const { return counters_; }
  const std::string& address_of(NodeId node) const;

 private:
  struct Relay {
    NodeId origin;
    uint64_t origin_seq;
    NodeId target;
    double started_ms;
  };
  struct Pending {
    MemberUpdate update;
    uint32_t sent = 0;
  };
  void Set(NodeId node, const std::string& address, uint64_t incarnation, MemberState state, double now_ms,
           Changes* changes);
  void Gossip(const MemberUpdate& u);
  NodeId NextProbeTarget();
  void ReconnectPing(std::vector<Probe>* out);

  const NodeId self_;
  const std::string address_;
  uint64_t incarnation_;
  const MembershipOptions options_;
  Rng rng_;
  std::map<NodeId, Member> members_;  // excluding self
  std::vector<Pending> pending_;      // updates still to piggyback
  std::vector<NodeId> order_;         // the current probe round
  size_t next_in_order_ = 0;
  uint64_t seq_ = 0;
  double next_probe_ms_ = 0;
  // The probe in flight: target, seq, start, whether indirect pings went out.
  bool probing_ = false;
  NodeId probe_target_ = 0;
  uint64_t probe_seq_ = 0;
  double probe_start_ms_ = 0;
  bool indirect_sent_ = false;
  std::map<uint64_t, Relay> relays_;  // by the seq this node used for the relayed ping
  uint64_t periods_ = 0;              // probe periods begun
  Counters counters_;
};

}  // namespace plexus::gossip
