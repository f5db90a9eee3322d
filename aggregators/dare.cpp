// DARE (Yu, Yu, Yu, Huang, Li, ICML 2024, "Language Models are Super Mario"): drop each entry of
// each delta with probability p and rescale the survivors by 1 / (1 - p), then take the
// example-weighted mean. The drops come from a generator seeded by `seed` and the update's
// position in canonical (client id) order, so the same inputs and seed give the same bytes; the
// CRDT layer derives the seed from the contribution set's Merkle root.
#include <cmath>
#include <cstdio>

#include "aggregators/robust_aggregator.h"
#include "aggregators/strategy_spec.h"
#include "core/rng.h"

namespace plexus {

Result<std::unique_ptr<Aggregator>> MakeDare(StrategySpec& spec, ThreadPool* pool) {
  PLEXUS_ASSIGN_OR_RETURN(double p, spec.GetDouble("p", 0.5));
  PLEXUS_ASSIGN_OR_RETURN(int64_t seed, spec.GetCount("seed", 0));
  if (!(p >= 0.0 && p < 1.0))
    return InvalidArgumentError("strategy 'dare': p=" + std::to_string(p) + " must lie in [0, 1)");
  if (seed < 0) return InvalidArgumentError("strategy 'dare': seed must not be negative");
  char description[80];
  std::snprintf(description, sizeof description, "dare(p=%g,seed=%lld)", p, static_cast<long long>(seed));
  RobustRule rule = [p, seed](std::span<const BufferedUpdate> u, ThreadPool*) -> Result<std::vector<double>> {
    const size_t size = u[0].delta.size();
    double total = 0.0;
    for (const BufferedUpdate& b : u) total += b.examples;
    const double rescale = 1.0 / (1.0 - p);
    std::vector<double> out(size, 0.0);
    for (size_t i = 0; i < u.size(); ++i) {
      Rng rng = Rng::Derive(static_cast<uint64_t>(seed), i);
      const double w = u[i].examples / total * rescale;
      for (size_t j = 0; j < size; ++j) {
        if (rng.Uniform() >= p) out[j] += w * u[i].delta[j];
      }
    }
    return out;
  };
  return MakeRobust(description, std::move(rule), pool);
}

}  // namespace plexus
