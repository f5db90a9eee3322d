// CRDT gossip's factory (`--gossip crdt[:wait_ms=W,interval_ms=I]`); the node is
// gossip/protocol/crdt_node.h.
#include <memory>
#include <string>

#include "aggregators/registry.h"
#include "gossip/protocol/crdt_node.h"
#include "gossip/protocol/registry.h"

namespace plexus::gossip {

Result<std::unique_ptr<ProtocolFactory>> MakeCrdtGossip(StrategySpec& spec) {
  PLEXUS_ASSIGN_OR_RETURN(double wait_ms, spec.GetDouble("wait_ms", 30000.0));
  PLEXUS_ASSIGN_OR_RETURN(double interval_ms, spec.GetDouble("interval_ms", 200.0));
  if (!(wait_ms > 0)) return InvalidArgumentError("crdt:wait_ms must be positive");
  if (!(interval_ms > 0)) return InvalidArgumentError("crdt:interval_ms must be positive");
  PLEXUS_ASSIGN_OR_RETURN(
      std::unique_ptr<ProtocolFactory> factory,
      MakeFactory("crdt(wait_ms=" + std::to_string(static_cast<int64_t>(wait_ms)) +
                      ",interval_ms=" + std::to_string(static_cast<int64_t>(interval_ms)) + ")",
                  "complete",
                  [wait_ms, interval_ms](const NodeContext& ctx, std::shared_ptr<const ModelState> initial,
                                         NeighbourMerge*) -> std::unique_ptr<Protocol> {
                    return std::make_unique<CrdtNode>(ctx, std::move(initial), CrdtStrategy(ctx.merge_spec), wait_ms,
                                                      interval_ms);
                  }));
  factory->set_uses_replicas();
  return factory;
}

std::string CrdtStrategy(const std::string& merge_spec) { return merge_spec == "mean" ? "fedavg" : merge_spec; }

}  // namespace plexus::gossip
