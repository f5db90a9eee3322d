// D-PSGD: see dpsgd.h.
#include "gossip/protocol/dpsgd.h"

#include "gossip/protocol/registry.h"

namespace plexus::gossip {

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
