// Coordinate-wise median and trimmed mean (Yin et al., ICML 2018).
#include "aggregators/coordinate_wise.h"

#include <algorithm>
#include <cstdio>

#include "aggregators/robust_aggregator.h"
#include "aggregators/streaming_mean.h"
#include "aggregators/strategy_spec.h"

namespace plexus {
namespace {

constexpr size_t kBlock = 256;

double Median(float* v, size_t n, const void*) { return MedianInPlace(v, n); }

double TrimmedMean(float* v, size_t n, const void* arg) {
  const size_t k = *static_cast<const size_t*>(arg);
  if (k > 0) {
    std::nth_element(v, v + k, v + n);
    std::nth_element(v + k, v + (n - k - 1), v + n);
  }
  double s = 0.0;
  for (size_t i = k; i < n - k; ++i) s += v[i];
  return s / static_cast<double>(n - 2 * k);
}

}  // namespace

double MedianInPlace(float* v, size_t n) {
  const size_t mid = n / 2;
  std::nth_element(v, v + mid, v + n);
  const double upper = v[mid];
  if (n % 2) return upper;
  const double lower = *std::max_element(v, v + mid);
  return 0.5 * (lower + upper);
}

std::vector<double> ReduceCoordinates(std::span<const BufferedUpdate> u, ThreadPool* pool,
                                      double (*reduce)(float*, size_t, const void*), const void* arg) {
  const size_t n = u.size();
  const size_t p = n ? u[0].delta.size() : 0;
  std::vector<double> out(p);
  const size_t blocks = (p + kBlock - 1) / kBlock;
  ForRanges(pool, blocks, [&](size_t b_begin, size_t b_end) {
    std::vector<float> column(n * kBlock);
    for (size_t b = b_begin; b < b_end; ++b) {
      const size_t begin = b * kBlock, len = std::min(kBlock, p - begin);
      for (size_t i = 0; i < n; ++i) {
        const float* src = u[i].delta.data() + begin;
        for (size_t c = 0; c < len; ++c) column[c * n + i] = src[c];
      }
      for (size_t c = 0; c < len; ++c) out[begin + c] = reduce(column.data() + c * n, n, arg);
    }
  });
  return out;
}

Result<std::unique_ptr<Aggregator>> MakeMedian(StrategySpec&, ThreadPool* pool) {
  return MakeRobust(
      "median",
      [](std::span<const BufferedUpdate> u, ThreadPool* p) -> Result<std::vector<double>> {
        return ReduceCoordinates(u, p, &Median, nullptr);
      },
      pool);
}

Result<std::unique_ptr<Aggregator>> MakeTrimmedMean(StrategySpec& spec, ThreadPool* pool) {
  PLEXUS_ASSIGN_OR_RETURN(double beta, spec.GetDouble("beta", 0.1));
  if (!(beta >= 0.0 && beta < 0.5)) {
    return InvalidArgumentError("strategy 'trimmed_mean': beta=" + std::to_string(beta) + " must lie in [0, 0.5)");
  }
  char description[64];
  std::snprintf(description, sizeof description, "trimmed_mean(beta=%g)", beta);
  return MakeRobust(
      description,
      [beta](std::span<const BufferedUpdate> u, ThreadPool* p) -> Result<std::vector<double>> {
        // beta < 1/2 keeps 2 floor(beta n) < n: something always remains.
        const auto k = static_cast<size_t>(beta * static_cast<double>(u.size()));
        return ReduceCoordinates(u, p, &TrimmedMean, &k);
      },
      pool);
}

}  // namespace plexus
