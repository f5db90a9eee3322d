// D-PSGD (Lian et al. 2017), adapt-then-combine: every round a node trains, sends its model to
// all its live out-neighbours, waits for all its live in-neighbours' models of the round (or the
// round's timer), and mixes with Metropolis-Hastings weights 1 / (1 + max(d_i, d_j)) on
// undirected graphs (d = live degrees, so a node that lost a neighbour re-normalizes at once),
// or 1 / (in-degree + 1) on directed ones. A missing neighbour's weight stays with the node.
#include <algorithm>

#include "gossip/protocol/registry.h"
#include "gossip/protocol/round_gossip.h"

namespace plexus::gossip {
namespace {

class Dpsgd final : public RoundGossip {
 public:
  using RoundGossip::RoundGossip;

 private:
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

}  // namespace

Result<std::unique_ptr<ProtocolFactory>> MakeDpsgd(StrategySpec& spec) {
  PLEXUS_ASSIGN_OR_RETURN(double wait_ms, spec.GetDouble("wait_ms", 30000.0));
  if (!(wait_ms > 0)) return InvalidArgumentError("dpsgd:wait_ms must be positive");
  return MakeFactory("dpsgd(wait_ms=" + std::to_string(static_cast<int64_t>(wait_ms)) + ")", "regular:d=4",
                     [wait_ms](const NodeContext& ctx, std::shared_ptr<const ModelState> initial,
                               NeighbourMerge* merge) -> std::unique_ptr<Protocol> {
                       return std::make_unique<Dpsgd>(ctx, std::move(initial), merge, wait_ms);
                     });
}

}  // namespace plexus::gossip
