// SwimDriver: the SWIM membership of every node of a gossip simulation (simulations/gossip_sim.h),
// driven as `plexus peer` drives its own (gossip/membership/membership.h, the same object): probes
// travel the event network as control messages (ahead of queued model bytes, as a peer's control
// frames go before its chunks), each carrying the sender's piggybacked rumours; rumours also ride
// on the protocol's messages (Piggyback, Hear); a restarted node comes back with a higher
// incarnation and a hello to every member it remembers, answered with the receiver's whole
// membership. Each node's protocol sees its peers through view(i): the topology filtered by what
// that node's membership says.
//
// Every node holds every member: O(N^2) memory. Borrows the topology and the network, which
// outlive it. Single-threaded, like the simulator; deterministic for a seed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "gossip/membership/membership.h"
#include "gossip/membership/membership_view.h"
#include "gossip/protocol/topology.h"
#include "simulations/event_network.h"

namespace plexus {

class SwimDriver {
 public:
  using NodeId = gossip::NodeId;
  struct Hooks {
    std::function<bool(NodeId)> live;  // the node runs (a message to a crashed node is lost)
    // Node j's membership changed: members that joined or left, for its protocol.
    std::function<void(NodeId, const gossip::Membership::Changes&)> changed;
    std::function<void()> lost;  // a message dropped by a partition
  };

  // Bytes of a probe without rumours, and of one rumour (no address in the simulator).
  static constexpr uint64_t kProbeBytes = 32;
  static constexpr uint64_t kRumourBytes = 24;

  // Nodes 0 .. n-1, each knowing every other alive at incarnation 1 (as after a first meeting).
  SwimDriver(size_t n, const gossip::Topology* topology, EventNetwork* net, uint64_t seed, Hooks hooks);

  const gossip::PeerView* view(NodeId i) const { return views_[i].get(); }
  // One of node i's ticks (a peer's come every 100 ms): probes out, changes to its protocol.
  void Tick(NodeId i);
  // Rumours for a message node i sends (counted as membership bytes).
  std::vector<gossip::MemberUpdate> Piggyback(NodeId i);
  // Rumours that arrived at node j on a message.
  void Hear(NodeId j, const std::vector<gossip::MemberUpdate>& rumours);
  // Node i comes back from a crash: a new membership with a higher incarnation and the members
  // it remembers, and a hello to each it holds live.
  void Restart(NodeId i);

  // What node i's membership says of every member (itself included), as a peer reports it.
  std::vector<gossip::MemberUpdate> Snapshot(NodeId i) const { return members_[i]->Snapshot(); }
  // Over every node since the start (restarted nodes' earlier memberships included).
  gossip::Membership::Counters counters() const;
  // (live node, other node) pairs where the live node's view of the other's liveness is wrong.
  int64_t WrongViews() const;
  uint64_t bytes() const { return bytes_; }  // probes, hellos and rumours sent

 private:
  void SendProbes(NodeId i, const std::vector<gossip::Membership::Probe>& probes);
  void Changed(NodeId j, const gossip::Membership::Changes& changes);

  const size_t n_;
  EventNetwork* const net_;
  const uint64_t seed_;
  const Hooks hooks_;
  // Emplaced anew when a node restarts: the view keeps pointing at the same place.
  std::vector<std::optional<gossip::Membership>> members_;
  std::vector<std::unique_ptr<gossip::MembershipView>> views_;
  gossip::Membership::Counters retired_;  // of memberships replaced by restarts
  uint64_t bytes_ = 0;
};

}  // namespace plexus
