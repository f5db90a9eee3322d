// Coordinate-wise median and trimmed mean (Yin et al., ICML 2018).
#include "aggregators/coordinate_wise.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "aggregators/batcher_network.h"
#include "aggregators/robust_aggregator.h"
#include "aggregators/simd_kernels.h"
#include "aggregators/strategy_spec.h"
#include "aggregators/streaming_mean.h"

namespace plexus {
namespace {

void MedianRows(const float* const* rows, size_t n, size_t len, double* out, const void*) {
  const float* hi = rows[n / 2];
  if (n % 2) {
    for (size_t c = 0; c < len; ++c) out[c] = hi[c];
    return;
  }
  const float* lo = rows[n / 2 - 1];
  for (size_t c = 0; c < len; ++c) out[c] = 0.5 * (static_cast<double>(lo[c]) + hi[c]);
}

// Rows k..n-k-1 hold the middle values (ranks 0..k-1 and n-k..n-1 are exact, so what is left
// between them is exactly the middle multiset); summed in row order.
void TrimmedMeanRows(const float* const* rows, size_t n, size_t len, double* out, const void* arg) {
  const size_t k = *static_cast<const size_t*>(arg);
  std::fill(out, out + len, 0.0);
  for (size_t i = k; i < n - k; ++i) simd::Add(out, rows[i], len);
  const double inv = 1.0 / static_cast<double>(n - 2 * k);
  for (size_t c = 0; c < len; ++c) out[c] *= inv;
}

std::vector<uint32_t> MedianRanks(size_t n) {
  if (n % 2) return {static_cast<uint32_t>(n / 2)};
  return {static_cast<uint32_t>(n / 2 - 1), static_cast<uint32_t>(n / 2)};
}

std::vector<uint32_t> TailRanks(size_t n, size_t k) {
  std::vector<uint32_t> r;
  for (size_t i = 0; i < k; ++i) {
    r.push_back(static_cast<uint32_t>(i));
    r.push_back(static_cast<uint32_t>(n - 1 - i));
  }
  return r;
}

}  // namespace

std::vector<Comparator> SortingNetwork(size_t n) {
  std::vector<Comparator> net;
  ForEachBatcherComparator(
      n, [&](size_t a, size_t b) { net.emplace_back(static_cast<uint32_t>(a), static_cast<uint32_t>(b)); });
  return net;
}

std::vector<Comparator> SelectionNetwork(size_t n, std::span<const uint32_t> ranks) {
  const std::vector<Comparator> full = SortingNetwork(n);
  std::vector<bool> live(n, false);
  for (uint32_t r : ranks) live[r] = true;
  std::vector<Comparator> kept;
  for (auto it = full.rbegin(); it != full.rend(); ++it) {
    if (live[it->first] || live[it->second]) {
      kept.push_back(*it);
      live[it->first] = live[it->second] = true;
    }
  }
  std::reverse(kept.begin(), kept.end());
  return kept;
}

std::vector<uint32_t> AllRanks(size_t n) {
  std::vector<uint32_t> r(n);
  for (size_t i = 0; i < n; ++i) r[i] = static_cast<uint32_t>(i);
  return r;
}

std::vector<double> ReduceSortedCoordinates(std::span<const float* const> deltas, size_t p, ThreadPool* pool,
                                            std::span<const uint32_t> ranks, SortedBlockReducer reduce,
                                            const void* arg) {
  const size_t n = deltas.size();
  std::vector<double> out(p);
  if (n == 0 || p == 0) return out;
  // Keep the n rows of a block within about 32 KiB.
  const size_t block = std::max<size_t>(16, (8192 / n) & ~size_t{7});
  const size_t blocks = (p + block - 1) / block;
  // Batcher's network first sorts aligned groups of 16 wires (its comparators before the first
  // that joins two groups): each full group is sorted in registers as it is read in
  // (simd::SortGroupsOf16), and only the network's other comparators run over the block. The
  // asked ranks get the same values: the rest of the network sees each group sorted either way.
  const size_t groups = n / 16;
  std::vector<uint32_t> pairs;
  bool joined = false;
  for (const auto& [a, b] : SelectionNetwork(n, ranks)) {
    joined = joined || a / 16 != b / 16;
    if (!joined && b < 16 * groups) continue;  // within a full group: sorted in registers
    pairs.push_back(a);
    pairs.push_back(b);
  }
  ForRanges(
      pool, blocks,
      [&](size_t b_begin, size_t b_end) {
        std::vector<float> storage(n * block);
        std::vector<float*> rows(n);
        std::vector<const float*> inputs(16 * groups);
        for (size_t i = 0; i < n; ++i) rows[i] = storage.data() + i * block;
        for (size_t b = b_begin; b < b_end; ++b) {
          const size_t begin = b * block, len = std::min(block, p - begin);
          for (size_t i = 0; i < 16 * groups; ++i) inputs[i] = deltas[i] + begin;
          simd::SortGroupsOf16(storage.data(), block, inputs.data(), groups, len);
          for (size_t i = 16 * groups; i < n; ++i) std::memcpy(rows[i], deltas[i] + begin, len * sizeof(float));
          simd::ApplyComparators(storage.data(), block, pairs.data(), pairs.size() / 2, len);
          reduce(rows.data(), n, len, out.data() + begin, arg);
        }
      },
      /*min_chunk=*/1);
  return out;
}

double MedianInPlace(float* v, size_t n) {
  const size_t mid = n / 2;
  std::nth_element(v, v + mid, v + n);
  const double upper = v[mid];
  if (n % 2) return upper;
  const double lower = *std::max_element(v, v + mid);
  return 0.5 * (lower + upper);
}

namespace {

std::vector<const float*> Pointers(std::span<const BufferedUpdate> u) {
  std::vector<const float*> out;
  for (const BufferedUpdate& b : u) out.push_back(b.delta.data());
  return out;
}

}  // namespace

Result<std::unique_ptr<Aggregator>> MakeMedian(StrategySpec&, ThreadPool* pool) {
  return MakeRobust(
      "median",
      [](std::span<const BufferedUpdate> u, ThreadPool* p) -> Result<std::vector<double>> {
        return ReduceSortedCoordinates(Pointers(u), u[0].delta.size(), p, MedianRanks(u.size()), &MedianRows, nullptr);
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
        return ReduceSortedCoordinates(Pointers(u), u[0].delta.size(), p, TailRanks(u.size(), k), &TrimmedMeanRows, &k);
      },
      pool);
}

}  // namespace plexus
