// NeighbourMerge: how a gossip node combines its own freshly trained model with the models its
// neighbours sent this round (`--merge SPEC`, default mean):
//   mean                      the weighted mean (the protocol's mixing weights)
//   clipped[:tau=T]           ClippedGossip: x_i + sum_j W_ij clip(x_j - x_i, tau); without tau, each
//                             node takes the median of its neighbours' distances this round, so that
//                             fewer than half of them lying cannot stretch it
//   balance[:gamma=G,kappa=K,alpha=A]  BALANCE: a neighbour is accepted only when
//                             ||x_i - x_j|| <= G exp(-K t / T) ||x_i||; then
//                             x_i <- A x_i + (1 - A) mean(accepted) (defaults 0.3, 1, 0.5)
//   any strategy of the aggregators registry, e.g. trimmed_mean:beta=0.2 or median, run over self
//   plus neighbours (robust rules need more honest neighbours than the degree allows liars).
// The protocol checks layout and finiteness of every neighbour model before it gets here.
// A new rule is one class in neighbour_merge.cpp and one line in MakeNeighbourMerge.
// Thread-compatible: one per node or one per driver thread.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/model_state.h"
#include "core/status.h"

namespace plexus::gossip {

struct WeightedModel {
  const ModelState* model;
  double weight;  // the node's mixing weight for it; self_weight plus all of these is 1
};

class NeighbourMerge {
 public:
  virtual ~NeighbourMerge() = default;
  // The merged model, with `self`'s layout and version. `round` of `total_rounds` (schedules).
  virtual Result<ModelState> Merge(const ModelState& self, double self_weight,
                                   std::span<const WeightedModel> neighbours, uint64_t round,
                                   uint64_t total_rounds) = 0;
  virtual std::string Describe() const = 0;
  // False for rules that are not a weighted mean (push-sum can only mix by weights).
  virtual bool linear() const { return false; }
};

// InvalidArgument naming --merge for an unknown rule or bad parameters.
Result<std::unique_ptr<NeighbourMerge>> MakeNeighbourMerge(std::string_view spec);
// Every name --merge takes: gossip's own rules (mean, clipped, balance), then the aggregators
// strategies; --help lists these and an unknown name's refusal names them.
std::vector<std::string> MergeRuleNames();

}  // namespace plexus::gossip
