// Centered clipping (Karimireddy, He, Jaggi, ICML 2021): starting from the previous round's
// aggregate as the center v, repeat `iters` times v += (1/n) sum_i (x_i - v) min(1, tau/||x_i - v||).
// The center is kept in memory between rounds (zero at start and after a restart).
#include <cmath>
#include <cstdio>
#include <memory>

#include "aggregators/robust_aggregator.h"
#include "aggregators/strategy_spec.h"

namespace plexus {

Result<std::unique_ptr<Aggregator>> MakeCenteredClip(StrategySpec& spec, ThreadPool* pool) {
  PLEXUS_ASSIGN_OR_RETURN(double tau, spec.GetDouble("tau", 10.0));
  // Each iteration reads every update: bounded, so that a mistyped count fails at start.
  PLEXUS_ASSIGN_OR_RETURN(int64_t iters, spec.GetCount("iters", 3, 1, kMaxRobustIterations));
  if (!(tau > 0)) return InvalidArgumentError("strategy 'centered_clip': tau must be positive");
  char description[80];
  std::snprintf(description, sizeof description, "centered_clip(tau=%g,iters=%lld)", tau,
                static_cast<long long>(iters));
  auto center = std::make_shared<std::vector<double>>();
  RobustRule rule = [=](std::span<const BufferedUpdate> u, ThreadPool*) -> Result<std::vector<double>> {
    const size_t p = u[0].delta.size();
    std::vector<double>& v = *center;
    if (v.size() != p) v.assign(p, 0.0);
    const double inv_n = 1.0 / static_cast<double>(u.size());
    std::vector<double> step(p);
    for (int64_t it = 0; it < iters; ++it) {
      std::fill(step.begin(), step.end(), 0.0);
      for (const BufferedUpdate& b : u) {
        double sq = 0.0;
        for (size_t j = 0; j < p; ++j) {
          const double d = b.delta[j] - v[j];
          sq += d * d;
        }
        const double norm = std::sqrt(sq);
        const double scale = norm > tau ? tau / norm : 1.0;
        for (size_t j = 0; j < p; ++j) step[j] += (b.delta[j] - v[j]) * scale;
      }
      for (size_t j = 0; j < p; ++j) v[j] += step[j] * inv_n;
    }
    return v;
  };
  return MakeRobust(description, std::move(rule), pool);
}

}  // namespace plexus
