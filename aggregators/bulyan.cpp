// Bulyan (El Mhamdi, Guerraoui, Rouault, ICML 2018): select theta = n - 2f updates by repeated
// Krum, then per coordinate average the beta = theta - 2f selected values closest to their
// median. Requires n >= 4f + 3.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "aggregators/coordinate_wise.h"
#include "aggregators/pairwise.h"
#include "aggregators/robust_aggregator.h"
#include "aggregators/strategy_spec.h"

namespace plexus {
namespace {

struct Trim {
  size_t beta;
};

// Per coordinate, the mean of the `beta` sorted values closest to the median: in sorted order
// they form a window, slid to where its farther end is nearest the median (ties: lower window).
void MeanClosestToMedian(const float* const* rows, size_t n, size_t len, double* out, const void* arg) {
  const size_t beta = static_cast<const Trim*>(arg)->beta;
  for (size_t c = 0; c < len; ++c) {
    auto v = [&](size_t i) { return static_cast<double>(rows[i][c]); };
    const double med = n % 2 ? v(n / 2) : 0.5 * (v(n / 2 - 1) + v(n / 2));
    size_t lo = 0;
    double best = std::max(med - v(0), v(beta - 1) - med);
    for (size_t s = 1; s + beta <= n; ++s) {
      const double cand = std::max(med - v(s), v(s + beta - 1) - med);
      if (cand < best) {
        best = cand;
        lo = s;
      }
    }
    double sum = 0.0;
    for (size_t i = lo; i < lo + beta; ++i) sum += v(i);
    out[c] = sum / static_cast<double>(beta);
  }
}

}  // namespace

Result<std::unique_ptr<Aggregator>> MakeBulyan(StrategySpec& spec, ThreadPool* pool) {
  PLEXUS_ASSIGN_OR_RETURN(int64_t f, spec.GetCount("f", 1));
  if (f > (std::numeric_limits<int64_t>::max() - 3) / 4) {  // 4f + 3 updates, counted below, must fit
    return InvalidArgumentError("strategy 'bulyan': f=" + std::to_string(f) +
                                " is too large: no federation has the 4f + 3 updates it needs");
  }
  RobustRule rule = [f](std::span<const BufferedUpdate> u, ThreadPool* p) -> Result<std::vector<double>> {
    const size_t n = u.size();
    if (static_cast<int64_t>(n) < 4 * f + 3) return PreconditionFailed("bulyan", "n >= 4f + 3", n, f);
    const size_t theta = n - 2 * static_cast<size_t>(f);
    const std::vector<double> dist = PairwiseSquaredDistances(u, p);
    std::vector<size_t> remaining(n);
    std::iota(remaining.begin(), remaining.end(), size_t{0});
    std::vector<size_t> selected;
    while (selected.size() < theta) {
      const size_t r = remaining.size();
      const size_t neighbours = r > static_cast<size_t>(f) + 2 ? r - static_cast<size_t>(f) - 2 : 0;
      const size_t winner = ArgMin(KrumScores(dist, n, remaining, neighbours));
      selected.push_back(remaining[winner]);
      remaining.erase(remaining.begin() + static_cast<ptrdiff_t>(winner));
    }
    std::sort(selected.begin(), selected.end());
    std::vector<const float*> chosen;
    for (size_t i : selected) chosen.push_back(u[i].delta.data());
    const Trim trim{theta - 2 * static_cast<size_t>(f)};
    return ReduceSortedCoordinates(chosen, u[0].delta.size(), p, AllRanks(chosen.size()), &MeanClosestToMedian, &trim);
  };
  return MakeRobust("bulyan(f=" + std::to_string(f) + ")", std::move(rule), pool, static_cast<size_t>(4 * f + 3));
}

}  // namespace plexus
