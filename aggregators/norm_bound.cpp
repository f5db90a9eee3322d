// Norm bounding (Sun et al., 2019): scale each delta to at most `max` in L2 norm, then take the
// example-weighted mean. `max=<number>` streams (O(model) memory); `max=median` uses the median
// of this round's update norms as the bound, so it buffers the round's updates.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "aggregators/averaging.h"
#include "aggregators/coordinate_wise.h"
#include "aggregators/robust_aggregator.h"
#include "aggregators/simd_kernels.h"
#include "aggregators/strategy_spec.h"
#include "aggregators/streaming_mean.h"

namespace plexus {

Result<std::unique_ptr<Aggregator>> MakeNormBound(StrategySpec& spec, ThreadPool* pool) {
  PLEXUS_ASSIGN_OR_RETURN(std::string max, spec.GetString("max", "median"));
  if (max == "median") {
    RobustRule rule = [](std::span<const BufferedUpdate> u, ThreadPool* p) -> Result<std::vector<double>> {
      std::vector<float> norms;
      for (const BufferedUpdate& b : u) {
        norms.push_back(static_cast<float>(std::sqrt(simd::SquaredNorm(b.delta.data(), b.delta.size()))));
      }
      std::vector<float> scratch = norms;
      const double bound = MedianInPlace(scratch.data(), scratch.size());
      StreamingMean mean(p);
      mean.Reset(u[0].delta.size());
      for (size_t i = 0; i < u.size(); ++i) {
        mean.Fold(u[i].delta, u[i].examples, norms[i] > bound && norms[i] > 0 ? bound / norms[i] : 1.0);
      }
      return mean.Mean();
    };
    return MakeRobust("norm_bound(max=median)", std::move(rule), pool);
  }
  char* end = nullptr;
  errno = 0;
  const double bound = std::strtod(max.c_str(), &end);
  if (max.empty() || *end != '\0' || errno != 0 || !(bound > 0) || !std::isfinite(bound)) {
    return InvalidArgumentError("strategy 'norm_bound': max='" + max + "' must be a positive number or 'median'");
  }
  // weighted=false: every clipped delta weighs one, as central DP at a root over edges needs.
  PLEXUS_ASSIGN_OR_RETURN(bool weighted, spec.GetBool("weighted", true));
  char params[64];
  std::snprintf(params, sizeof params, "max=%g%s", bound, weighted ? "" : ",weighted=false");
  AveragingOptions o{"norm_bound", params, weighted, /*normalize_by_steps=*/false, bound};
  return AveragingFrom(spec, std::move(o), MakePlainStep(1.0), pool);
}

}  // namespace plexus
