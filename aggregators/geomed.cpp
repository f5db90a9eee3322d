// Geometric median by smoothed Weiszfeld iterations, as in RFA (Pillutla, Kakade, Harchaoui,
// IEEE TSP 2022): start at the example-weighted mean, then repeatedly re-weight each update by
// alpha_i / max(eps, ||z - v_i||). Stops after `iters` iterations or when the objective
// sum_i alpha_i ||z - v_i|| improves by less than a relative 1e-6.
#include <cmath>
#include <cstdio>

#include "aggregators/robust_aggregator.h"
#include "aggregators/strategy_spec.h"
#include "aggregators/streaming_mean.h"

namespace plexus {
namespace {

double Distance(const std::vector<double>& z, std::span<const float> v) {
  double s = 0.0;
  for (size_t j = 0; j < z.size(); ++j) {
    const double d = z[j] - v[j];
    s += d * d;
  }
  return std::sqrt(s);
}

}  // namespace

Result<std::unique_ptr<Aggregator>> MakeGeoMed(StrategySpec& spec, ThreadPool* pool) {
  PLEXUS_ASSIGN_OR_RETURN(double eps, spec.GetDouble("eps", 1e-6));
  // Each iteration reads every update: bounded, so that a mistyped count fails at start.
  PLEXUS_ASSIGN_OR_RETURN(int64_t iters, spec.GetCount("iters", 100, 1, kMaxRobustIterations));
  if (!(eps > 0)) return InvalidArgumentError("strategy 'geomed': eps must be positive");
  char description[80];
  std::snprintf(description, sizeof description, "geomed(eps=%g,iters=%lld)", eps, static_cast<long long>(iters));
  RobustRule rule = [eps, iters](std::span<const BufferedUpdate> u, ThreadPool* p) -> Result<std::vector<double>> {
    const size_t n = u.size();
    double total = 0.0;
    for (const BufferedUpdate& b : u) total += b.examples;
    std::vector<double> alpha(n);
    for (size_t i = 0; i < n; ++i) alpha[i] = u[i].examples / total;

    StreamingMean mean(p);
    mean.Reset(u[0].delta.size());
    for (size_t i = 0; i < n; ++i) mean.Fold(u[i].delta, alpha[i]);
    std::vector<double> z = mean.Mean();
    double objective = 0.0;
    for (size_t i = 0; i < n; ++i) objective += alpha[i] * Distance(z, u[i].delta);
    for (int64_t it = 0; it < iters; ++it) {
      mean.Reset(z.size());
      for (size_t i = 0; i < n; ++i) mean.Fold(u[i].delta, alpha[i] / std::max(eps, Distance(z, u[i].delta)));
      z = mean.Mean();
      double next = 0.0;
      for (size_t i = 0; i < n; ++i) next += alpha[i] * Distance(z, u[i].delta);
      const bool converged = objective - next <= 1e-6 * objective;
      objective = next;
      if (converged) break;
    }
    return z;
  };
  return MakeRobust(description, std::move(rule), pool);
}

}  // namespace plexus
