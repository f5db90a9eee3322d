// OracleView: the gossip simulator's view of the federation when liveness is not learned by SWIM
// (`--liveness oracle`): the topology, filtered by who the simulator knows is live, shared by every
// node. On a complete topology the live list samples k neighbours in O(k) however many nodes
// there are (a million-node run cannot afford O(N) per sample). Not thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "gossip/protocol/protocol.h"
#include "gossip/protocol/topology.h"

namespace plexus {

class OracleView final : public gossip::PeerView {
 public:
  using NodeId = gossip::NodeId;
  using Topology = gossip::Topology;

  explicit OracleView(Topology topology) : topology_(std::move(topology)), live_(topology_.size(), true) {
    for (uint32_t i = 0; i < topology_.size(); ++i) {
      position_.push_back(i);
      live_list_.push_back(i);
    }
  }
  void OutNeighbours(NodeId self, uint64_t round, std::vector<NodeId>* out) const override {
    if (topology_.kind() == Topology::Kind::kComplete) return LiveExcept(self, out);
    topology_.Out(self, round, out);
    std::erase_if(*out, [&](NodeId j) { return !live_[j]; });
  }
  void InNeighbours(NodeId self, uint64_t round, std::vector<NodeId>* out) const override {
    if (topology_.kind() == Topology::Kind::kComplete) return LiveExcept(self, out);
    topology_.In(self, round, out);
    std::erase_if(*out, [&](NodeId j) { return !live_[j]; });
  }
  void SampleOutNeighbours(NodeId self, uint64_t round, size_t k, Rng& rng, std::vector<NodeId>* out) const override {
    if (topology_.kind() != Topology::Kind::kComplete) return PeerView::SampleOutNeighbours(self, round, k, rng, out);
    // Rejection sampling from the live list: O(k) however many nodes there are.
    out->clear();
    const size_t others = live_list_.size() - (live_[self] ? 1 : 0);
    k = std::min(k, others);
    while (out->size() < k) {
      const NodeId j = live_list_[rng.Below(live_list_.size())];
      if (j != self && std::find(out->begin(), out->end(), j) == out->end()) out->push_back(j);
    }
  }
  bool undirected() const override { return !topology_.directed(); }
  bool IsLive(NodeId node) const override { return node >= live_.size() || live_[node]; }  // (N: the server)

  void SetLive(NodeId node, bool live) {
    if (live_[node] == live) return;
    live_[node] = live;
    if (live) {
      position_[node] = static_cast<uint32_t>(live_list_.size());
      live_list_.push_back(node);
    } else {
      const NodeId last = live_list_.back();
      live_list_[position_[node]] = last;
      position_[last] = position_[node];
      live_list_.pop_back();
    }
  }
  const Topology& topology() const { return topology_; }

 private:
  void LiveExcept(NodeId self, std::vector<NodeId>* out) const {
    out->clear();
    for (NodeId j : live_list_) {
      if (j != self) out->push_back(j);
    }
    std::sort(out->begin(), out->end());
  }

  const Topology topology_;
  std::vector<bool> live_;
  std::vector<uint32_t> position_;  // of each live node in live_list_
  std::vector<NodeId> live_list_;
};

}  // namespace plexus
