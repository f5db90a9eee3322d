// Epidemic Learning (de Vos et al. 2023, EL-Local): every round a node trains, sends its model to
// S peers drawn at random from its live out-neighbours (all live nodes on the complete topology,
// the paper's setting), and averages, uniformly, what arrived. A node cannot know how many models
// will come, so it merges when the round's timer fires (wait_ms after its sends); models that
// arrive after it moved on join its next merge rather than being lost.
#include "gossip/protocol/registry.h"
#include "gossip/protocol/round_gossip.h"

namespace plexus::gossip {
namespace {

class EpidemicLearning final : public RoundGossip {
 public:
  EpidemicLearning(const NodeContext& ctx, std::shared_ptr<const ModelState> initial, NeighbourMerge* merge,
                   double wait_ms, size_t s)
      : RoundGossip(ctx, std::move(initial), merge, wait_ms), s_(s) {}

 private:
  void Targets(uint64_t round, std::vector<NodeId>* out) override {
    ctx_.peers->SampleOutNeighbours(ctx_.self, round, s_, rng_, out);
  }
  void Expected(uint64_t, std::vector<NodeId>* out) override { out->clear(); }
  double Weight(uint32_t, size_t received) override { return 1.0 / (1.0 + static_cast<double>(received)); }
  bool keeps_late_models() const override { return true; }

  const size_t s_;
};

}  // namespace

Result<std::unique_ptr<ProtocolFactory>> MakeEpidemic(StrategySpec& spec) {
  PLEXUS_ASSIGN_OR_RETURN(int64_t s, spec.GetCount("s", 3));
  PLEXUS_ASSIGN_OR_RETURN(double wait_ms, spec.GetDouble("wait_ms", 1000.0));
  if (s < 1) return InvalidArgumentError("el:s must be at least 1");
  if (!(wait_ms > 0)) return InvalidArgumentError("el:wait_ms must be positive");
  return MakeFactory(
      "el(s=" + std::to_string(s) + ",wait_ms=" + std::to_string(static_cast<int64_t>(wait_ms)) + ")", "complete",
      [s, wait_ms](const NodeContext& ctx, std::shared_ptr<const ModelState> initial,
                   NeighbourMerge* merge) -> std::unique_ptr<Protocol> {
        return std::make_unique<EpidemicLearning>(ctx, std::move(initial), merge, wait_ms, static_cast<size_t>(s));
      });
}

}  // namespace plexus::gossip
