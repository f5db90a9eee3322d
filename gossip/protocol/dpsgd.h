// D-PSGD (Lian et al. 2017), adapt-then-combine: every round a node trains, sends its model to
// all its live out-neighbours, waits for all its live in-neighbours' models of the round (or the
// round's timer), and mixes with Metropolis-Hastings weights 1 / (1 + max(d_i, d_j)) on
// undirected graphs (d = live degrees, so a node that lost a neighbour re-normalizes at once),
// or 1 / (in-degree + 1) on directed ones. A missing neighbour's weight stays with the node.
#pragma once

#include <algorithm>
#include <vector>

#include "gossip/protocol/round_gossip.h"

namespace plexus::gossip {

class Dpsgd : public RoundGossip {
 public:
  using RoundGossip::RoundGossip;

 protected:
  void Targets(uint64_t round, std::vector<NodeId>* out) override { ctx_.peers->OutNeighbours(ctx_.self, round, out); }
  void Expected(uint64_t round, std::vector<NodeId>* out) override { ctx_.peers->InNeighbours(ctx_.self, round, out); }
  double Weight(uint32_t sender_degree, size_t) override {
    if (ctx_.peers->undirected()) return 1.0 / (1.0 + std::max(LiveDegree(), sender_degree));
    ctx_.peers->InNeighbours(ctx_.self, rounds_completed(), &in_);
    return 1.0 / (1.0 + static_cast<double>(in_.size()));
  }
  bool keeps_late_models() const override { return false; }

  std::vector<NodeId> in_;
};

}  // namespace plexus::gossip
