// Krum and Multi-Krum (Blanchard et al., NeurIPS 2017). Score each update by the summed squared
// distance to its n - f - 2 nearest neighbours; Krum returns the lowest-scoring update,
// Multi-Krum the plain mean of the m lowest. Requires n > 2f + 2. Ties go to the smallest
// client id.
#include <algorithm>
#include <limits>
#include <numeric>

#include "aggregators/pairwise.h"
#include "aggregators/robust_aggregator.h"
#include "aggregators/strategy_spec.h"

namespace plexus {
namespace {

Result<std::unique_ptr<Aggregator>> MakeKrumFamily(StrategySpec& spec, ThreadPool* pool, bool multi) {
  PLEXUS_ASSIGN_OR_RETURN(int64_t f, spec.GetCount("f", 1));
  if (f > (std::numeric_limits<int64_t>::max() - 3) / 2) {  // 2f + 3 updates, counted below, must fit
    return InvalidArgumentError("strategy '" + std::string(multi ? "multikrum" : "krum") + "': f=" + std::to_string(f) +
                                " is too large: no federation has the 2f + 3 updates it needs");
  }
  int64_t m = 1;
  if (multi) {
    PLEXUS_ASSIGN_OR_RETURN(m, spec.GetCount("m", 0));  // 0: n - f
  }
  const std::string name = multi ? "multikrum" : "krum";
  const std::string description =
      name + "(f=" + std::to_string(f) + (multi ? ",m=" + (m ? std::to_string(m) : std::string("n-f")) : "") + ")";
  RobustRule rule = [=](std::span<const BufferedUpdate> u, ThreadPool* p) -> Result<std::vector<double>> {
    const size_t n = u.size();
    if (static_cast<int64_t>(n) <= 2 * f + 2) return PreconditionFailed(name, "n > 2f + 2", n, f);
    const size_t take = multi ? static_cast<size_t>(m ? m : static_cast<int64_t>(n) - f) : 1;
    if (take > n) {
      return FailedPreconditionError(name + ": m=" + std::to_string(take) + " exceeds the " + std::to_string(n) +
                                     " updates");
    }
    const std::vector<double> dist = PairwiseSquaredDistances(u, p);
    std::vector<size_t> all(n);
    std::iota(all.begin(), all.end(), size_t{0});
    const std::vector<double> scores = KrumScores(dist, n, all, n - static_cast<size_t>(f) - 2);
    std::vector<size_t> order = all;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
    std::vector<double> out(u[0].delta.size(), 0.0);
    for (size_t q = 0; q < take; ++q) {
      const std::span<const float> d = u[order[q]].delta;
      for (size_t j = 0; j < out.size(); ++j) out[j] += d[j];
    }
    for (double& x : out) x /= static_cast<double>(take);
    return out;
  };
  // n > 2f + 2, and Multi-Krum's m among them.
  const auto fewest = static_cast<size_t>(std::max<int64_t>(2 * f + 3, m));
  return MakeRobust(description, std::move(rule), pool, fewest);
}

}  // namespace

Result<std::unique_ptr<Aggregator>> MakeKrum(StrategySpec& spec, ThreadPool* pool) {
  return MakeKrumFamily(spec, pool, false);
}
Result<std::unique_ptr<Aggregator>> MakeMultiKrum(StrategySpec& spec, ThreadPool* pool) {
  return MakeKrumFamily(spec, pool, true);
}

}  // namespace plexus
