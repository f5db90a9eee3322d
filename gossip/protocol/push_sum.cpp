// Push-sum: see push_sum.h.
#include "gossip/protocol/push_sum.h"

#include "gossip/protocol/registry.h"

namespace plexus::gossip {

Result<std::unique_ptr<ProtocolFactory>> MakePushSum(StrategySpec&) {
  return MakeFactory(
      "pushsum", "onepeer-exponential",
      [](const NodeContext& ctx, std::shared_ptr<const ModelState> initial,
         NeighbourMerge*) -> std::unique_ptr<Protocol> { return std::make_unique<PushSum>(ctx, std::move(initial)); },
      /*mixes_by_weight_only=*/true);
}

}  // namespace plexus::gossip
