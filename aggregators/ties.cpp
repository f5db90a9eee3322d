// TIES merging (Yadav, Tam, Choshen, Raffel, Bansal, NeurIPS 2023) of task vectors (deltas):
// trim each delta to its `density` share of largest-magnitude entries, elect per coordinate the
// sign with the larger total trimmed mass, and average only the trimmed entries that agree with
// it (coordinates nobody keeps stay 0); the base then moves by lambda times that.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "aggregators/robust_aggregator.h"
#include "aggregators/strategy_spec.h"

namespace plexus {
namespace {

// The magnitude at or above which an entry is among the `keep` largest of `delta` (ties kept).
float MagnitudeThreshold(std::span<const float> delta, size_t keep) {
  if (keep == 0) return INFINITY;
  std::vector<float> magnitude(delta.size());
  for (size_t j = 0; j < delta.size(); ++j) magnitude[j] = std::fabs(delta[j]);
  const size_t at = magnitude.size() - keep;
  std::nth_element(magnitude.begin(), magnitude.begin() + static_cast<ptrdiff_t>(at), magnitude.end());
  return magnitude[at];
}

}  // namespace

Result<std::unique_ptr<Aggregator>> MakeTies(StrategySpec& spec, ThreadPool* pool) {
  PLEXUS_ASSIGN_OR_RETURN(double density, spec.GetDouble("density", 0.2));
  PLEXUS_ASSIGN_OR_RETURN(double lambda, spec.GetDouble("lambda", 1.0));
  if (!(density > 0.0 && density <= 1.0)) {
    return InvalidArgumentError("strategy 'ties': density=" + std::to_string(density) + " must lie in (0, 1]");
  }
  if (!(lambda > 0.0) || !std::isfinite(lambda))
    return InvalidArgumentError("strategy 'ties': lambda must be positive");
  char description[64];
  std::snprintf(description, sizeof description, "ties(density=%g,lambda=%g)", density, lambda);
  RobustRule rule = [density, lambda](std::span<const BufferedUpdate> u, ThreadPool*) -> Result<std::vector<double>> {
    const size_t p = u[0].delta.size();
    const auto keep = static_cast<size_t>(std::ceil(density * static_cast<double>(p)));
    std::vector<float> thresholds;
    for (const BufferedUpdate& b : u) thresholds.push_back(MagnitudeThreshold(b.delta, keep));
    auto kept = [&](size_t i, size_t j) {
      const float x = u[i].delta[j];
      return std::fabs(x) >= thresholds[i] && x != 0.0f;
    };
    std::vector<double> out(p, 0.0);
    for (size_t j = 0; j < p; ++j) {
      double mass = 0.0;
      for (size_t i = 0; i < u.size(); ++i) {
        if (kept(i, j)) mass += u[i].delta[j];
      }
      if (mass == 0.0) continue;
      double sum = 0.0;
      size_t agreeing = 0;
      for (size_t i = 0; i < u.size(); ++i) {
        if (kept(i, j) && (u[i].delta[j] > 0) == (mass > 0)) {
          sum += u[i].delta[j];
          ++agreeing;
        }
      }
      out[j] = lambda * sum / static_cast<double>(agreeing);
    }
    return out;
  };
  return MakeRobust(description, std::move(rule), pool);
}

}  // namespace plexus
