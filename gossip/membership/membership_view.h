// MembershipView: a gossip protocol's view of its peers (PeerView) on a real peer or a simulated
// one: the run's topology, filtered by who the node's SWIM membership says is live. On a complete
// topology the live members are the neighbours, whoever they are. Borrows the topology and the
// membership, which outlive it. Thread-compatible (the peer's loop thread).
#pragma once

#include <cstdint>
#include <vector>

#include "gossip/membership/membership.h"
#include "gossip/protocol/protocol.h"
#include "gossip/protocol/topology.h"

namespace plexus::gossip {

class MembershipView final : public PeerView {
 public:
  MembershipView(const Topology* topology, const Membership* membership)
      : topology_(*topology), membership_(membership) {}
  void OutNeighbours(NodeId self, uint64_t round, std::vector<NodeId>* out) const override {
    Neighbours(self, round, out, true);
  }
  void InNeighbours(NodeId self, uint64_t round, std::vector<NodeId>* out) const override {
    Neighbours(self, round, out, false);
  }
  bool undirected() const override { return !topology_.directed(); }
  bool IsLive(NodeId node) const override { return membership_->IsLive(node); }

 private:
  void Neighbours(NodeId self, uint64_t round, std::vector<NodeId>* out, bool outgoing) const;

  const Topology& topology_;
  const Membership* membership_;
};

}  // namespace plexus::gossip
