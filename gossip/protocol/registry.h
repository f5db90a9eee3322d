// The gossip registry: builds the nodes of a decentralized federation from `--gossip SPEC` and
// `--merge SPEC`:
//   dpsgd[:wait_ms=W]            D-PSGD with Metropolis-Hastings weights (dpsgd.cpp)
//   el[:s=S,wait_ms=W]           Epidemic Learning, S random peers per round (epidemic.cpp)
//   pushsum                      push-sum / stochastic gradient push, running sums (push_sum.cpp)
//   semidecentralized[:every=H,sample=K,mode=s2s|s2a,wait_ms=W]
//                                D-PSGD plus a server's average of K sampled nodes every H rounds
//                                (semi_decentralized.cpp)
//   choco[:codec=NAME,gamma=G,wait_ms=W]
//                                CHOCO-gossip: compressed changes of public copies, consensus step
//                                gamma, codec by name (compression/codec.h defaults; choco.cpp);
//                                simulator only
//   crdt[:wait_ms=W,interval_ms=I]
//                                every round's trained models are signed contributions to a CRDT
//                                replica, pulled from peers by Merkle-digest anti-entropy and
//                                resolved with --merge as an aggregators strategy: replicas holding
//                                the same contributions compute identical bytes (crdt.cpp)
//   diloco[:outer_lr=L,momentum=M,nesterov=B,wait_ms=W,interval_ms=I]
//                                DiLoCo without a server: pseudo-gradients as CRDT contributions,
//                                their --merge stepped by every peer with the outer Nesterov step,
//                                bit-identical everywhere (diloco.cpp)
// A new algorithm is one file defining its Make function plus one line in registry.cpp.
// A factory owns the merge rule its nodes share: the nodes of one factory belong to one driver
// thread. Immutable otherwise.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "aggregators/strategy_spec.h"
#include "gossip/protocol/neighbour_merge.h"
#include "gossip/protocol/protocol.h"

namespace plexus::gossip {

using NodeMaker =
    std::function<std::unique_ptr<Protocol>(const NodeContext&, std::shared_ptr<const ModelState>, NeighbourMerge*)>;

class ProtocolFactory {
 public:
  ProtocolFactory(std::string description, std::string default_topology, bool mixes_by_weight_only, NodeMaker make)
      : description_(std::move(description)),
        default_topology_(std::move(default_topology)),
        mixes_by_weight_only_(mixes_by_weight_only),
        make_(std::move(make)) {}

  // A node starting from `initial` (shared by every node that starts from the same model).
  std::unique_ptr<Protocol> MakeNode(NodeContext ctx, std::shared_ptr<const ModelState> initial) const {
    ctx.merge_spec = merge_spec_;
    return make_(ctx, std::move(initial), merge_.get());
  }
  // E.g. "el(s=3,wait_ms=1000)" and "mean".
  const std::string& description() const { return description_; }
  std::string merge_description() const { return merge_ ? merge_->Describe() : "mean"; }
  // The topology the algorithm is defined on, for an empty --topology.
  const std::string& default_topology() const { return default_topology_; }
  bool mixes_by_weight_only() const { return mixes_by_weight_only_; }
  void set_merge(std::unique_ptr<NeighbourMerge> merge, std::string spec) {
    merge_ = std::move(merge);
    merge_spec_ = std::move(spec);
  }
  // Algorithms whose round is H optimizer steps (DiLoCo's inner phase): the drivers refuse
  // --local-steps 0 (epochs) at start.
  bool needs_local_steps() const { return needs_local_steps_; }
  void set_needs_local_steps() { needs_local_steps_ = true; }
  // What the algorithm needs of the model its nodes start from (streaming DiLoCo: a tensor per
  // fragment at least); the drivers call it before they make nodes. OK when unset.
  Status CheckModel(const ModelState& model) const { return check_model_ ? check_model_(model) : Status::Ok(); }
  void set_model_check(std::function<Status(const ModelState&)> check) { check_model_ = std::move(check); }
  // Algorithms that talk to other nodes through CRDT replicas rather than messages (crdt, diloco).
  bool uses_replicas() const { return uses_replicas_; }
  void set_uses_replicas() { uses_replicas_ = true; }

  // Algorithms with a server (semi-decentralized): the driver adds one more node, id N.
  using ServerMaker = std::function<std::unique_ptr<Protocol>(const NodeContext&)>;
  bool needs_server() const { return static_cast<bool>(make_server_); }
  std::unique_ptr<Protocol> MakeServer(const NodeContext& ctx) const { return make_server_(ctx); }
  void set_server_maker(ServerMaker make) { make_server_ = std::move(make); }

 private:
  std::string description_, default_topology_;
  bool mixes_by_weight_only_;
  NodeMaker make_;
  ServerMaker make_server_;
  std::unique_ptr<NeighbourMerge> merge_;
  std::string merge_spec_ = "mean";
  bool uses_replicas_ = false;
  bool needs_local_steps_ = false;
  std::function<Status(const ModelState&)> check_model_;
};

// For the algorithm files: a factory of round-based nodes (any merge rule).
inline Result<std::unique_ptr<ProtocolFactory>> MakeFactory(std::string description, std::string default_topology,
                                                            NodeMaker make, bool mixes_by_weight_only = false) {
  return std::make_unique<ProtocolFactory>(std::move(description), std::move(default_topology), mixes_by_weight_only,
                                           std::move(make));
}

// InvalidArgument naming --gossip or --merge for an unknown algorithm or rule, a bad parameter,
// or a rule the algorithm cannot use (push-sum mixes by weights only: mean).
Result<std::unique_ptr<ProtocolFactory>> MakeGossip(std::string_view gossip_spec, std::string_view merge_spec);

// The aggregators strategy a CRDT gossip node resolves its replicas with, for `--merge SPEC`
// (mean is fedavg).
std::string CrdtStrategy(const std::string& merge_spec);

// Registered algorithm names.
std::vector<std::string> GossipNames();

}  // namespace plexus::gossip
