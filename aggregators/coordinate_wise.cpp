// Coordinate-wise median and trimmed mean (Yin et al., ICML 2018).
#include "aggregators/coordinate_wise.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <optional>

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
  // Four rows a pass over the sums, each value added in row order (weights of one are exact).
  constexpr double kOnes[4] = {1.0, 1.0, 1.0, 1.0};
  std::fill(out, out + len, 0.0);
  for (size_t i = k; i < n - k; i += 4) {
    simd::WeightedSumUpTo4(out, rows + i, kOnes, std::min<size_t>(4, n - k - i), len, /*store=*/false);
  }
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

// The merging stages for n >= 16 rows. Once every aligned group of 16 rows is sorted (in
// registers) and the last n % 16 rows among themselves, bitonic merges join sorted runs of 16 into
// runs of 32, 64, ... up to the power of two at or above n. Each merge of two runs of m starts with
// a flip (wire i of the first against wire 2m-1-i of the second) and continues with half-cleaners
// (i against i+d for d = m/2, ..., 1); every comparator puts the smaller value on the lower wire, so
// the missing wires n.. are +infinity (one shared row) that no comparator moves or needs to touch.
// Any three consecutive layers of this sequence split the wires into independent sets of eight
// whose comparators take one of three shapes (simd::TileLayers): each set runs as a tile held in
// registers, one load and one store per value for three layers instead of two loads and two
// stores per comparator (Batcher's odd-even merges, which the network for fewer rows uses, need
// fewer comparators, but theirs do not split so). Layers after the last full three run as pairs.
// Pruned by ReachingRanks: a tile runs when one of its comparators can reach an asked rank, and
// the others it runs touch only wires no asked rank depends on.
struct MergePlan {
  std::vector<simd::ComparatorTile> tiles;
  std::vector<uint32_t> pairs;  // after the tiles
  std::vector<uint32_t> order;  // rank r ends on wire order[r]; empty: on wire r
};

// What running a plan costs per column of eight, counted in memory operations (a tile's eight
// loads and eight stores, a pair's two of each) plus comparators.
size_t Cost(const MergePlan& plan) {
  size_t cost = (4 + 1) * (plan.pairs.size() / 2);
  for (const simd::ComparatorTile& t : plan.tiles) cost += 16 + simd::TileComparators(t.layers);
  return cost;
}

// Which comparators of `net` (in the order they run, over wires below `wires`) can change the
// values ending on wires `ranks`, walking back from the outputs: a comparator is needed when it
// touches a wire still needed, and then both its inputs are. One touching a wire at or above `n`
// (missing, +infinity) never changes anything.
std::vector<bool> ReachingRanks(std::span<const Comparator> net, size_t wires, size_t n,
                                std::span<const uint32_t> ranks) {
  std::vector<bool> needed(net.size(), false), live(wires, false);
  for (uint32_t r : ranks) live[r] = true;
  for (size_t c = net.size(); c-- > 0;) {
    const auto [a, b] = net[c];
    if (b < n && (live[a] || live[b])) {
      needed[c] = true;
      live[a] = live[b] = true;
    }
  }
  return needed;
}

MergePlan PlanMerges(size_t n, std::span<const uint32_t> ranks) {
  size_t size = 16;
  while (size < n) size <<= 1;
  // Every layer's comparators, one after another in `net`; a layer starts at first[l].
  std::vector<Comparator> net;
  std::vector<size_t> first;
  std::vector<bool> flip;
  auto add_layer = [&](bool is_flip, size_t width) {  // flip: the runs' length m; else the distance d
    first.push_back(net.size());
    flip.push_back(is_flip);
    for (size_t base = 0; base < size; base += 2 * width) {
      for (size_t i = 0; i < width; ++i) {
        const size_t a = base + i, b = is_flip ? base + 2 * width - 1 - i : base + i + width;
        net.emplace_back(static_cast<uint32_t>(a), static_cast<uint32_t>(b));
      }
    }
  };
  for (size_t m = 16; m < size; m <<= 1) {
    add_layer(true, m);
    for (size_t d = m / 2; d >= 1; d >>= 1) add_layer(false, d);
  }
  first.push_back(net.size());
  const std::vector<bool> needed = ReachingRanks(net, size, n, ranks);
  MergePlan plan;
  const size_t layers = flip.size(), tiled = layers / 3 * 3;
  for (size_t l = 0; l < tiled; l += 3) {
    // The sets of eight: wires joined by the three layers' comparators.
    std::vector<uint32_t> root(size);
    for (size_t w = 0; w < size; ++w) root[w] = static_cast<uint32_t>(w);
    auto find = [&](uint32_t w) {
      while (root[w] != w) w = root[w] = root[root[w]];
      return w;
    };
    for (size_t c = first[l]; c < first[l + 3]; ++c) root[find(net[c].first)] = find(net[c].second);
    std::vector<bool> any_needed(size, false);
    for (size_t c = first[l]; c < first[l + 3]; ++c) {
      if (needed[c]) any_needed[find(net[c].first)] = true;
    }
    std::vector<std::vector<uint32_t>> sets(size);
    for (size_t w = 0; w < size; ++w) sets[find(static_cast<uint32_t>(w))].push_back(static_cast<uint32_t>(w));
    const simd::TileLayers shape = flip[l]       ? simd::TileLayers::kMirrorHalf2Half1
                                   : flip[l + 2] ? simd::TileLayers::kHalf2Half1Mirror
                                                 : simd::TileLayers::kHalf4Half2Half1;
    // Every set has eight wires (the tests sort n = 16..300, 513, 1025 and 2049 fully).
    for (size_t w = 0; w < size; ++w) {
      if (sets[w].empty() || !any_needed[w]) continue;
      simd::ComparatorTile tile;
      for (size_t i = 0; i < 8; ++i) tile.rows[i] = std::min<uint32_t>(sets[w][i], static_cast<uint32_t>(n));
      tile.layers = shape;
      plan.tiles.push_back(tile);
    }
  }
  for (size_t c = first[tiled]; c < net.size(); ++c) {
    if (!needed[c]) continue;
    plan.pairs.push_back(net[c].first);
    plan.pairs.push_back(net[c].second);
  }
  return plan;
}

// The merging stages when every asked rank lies in the lowest or highest 16 (a trimmed mean's
// tails, k <= 16): only runs of 16 at the ends need merging. Pairs of sorted groups are merged
// into their lower and upper 16 (a value in the lower 16 has 16 at or above it, so it can only be
// among the lowest 16 overall; the upper 16 likewise). Then the lower runs are merged two at a
// time keeping the lower side, and the upper runs keeping the upper side: each merge discards 16
// values for good (they are in the middle), at a bitonic merge of 16 + 16 whose discarded side
// needs no further layers, where merging whole runs costs more with every doubling. A group left
// without a partner (the last of an odd number, and the last n % 16 rows, sorted among
// themselves, with +infinity above them) is merged into the lower run first and its upper side
// joins the upper runs, the partial group's last of all (its missing rows stay on top, where no
// comparator moves them). nullopt when an asked rank lies elsewhere or n < 32.
std::optional<MergePlan> PlanTailMerges(size_t n, std::span<const uint32_t> ranks) {
  constexpr uint32_t kRun = 16;
  const size_t groups = n / kRun, rest = n % kRun;
  if (groups < 2) return std::nullopt;
  for (uint32_t r : ranks) {
    if (r >= kRun && r + kRun < n) return std::nullopt;
  }
  struct Merge {
    uint32_t lower, upper;  // the first wires of two sorted runs of 16, lower < upper
  };
  std::vector<Merge> merges;
  std::vector<uint32_t> lows, highs;
  for (size_t g = 0; g + 1 < groups; g += 2) {
    const auto lower = static_cast<uint32_t>(kRun * g);
    merges.push_back({lower, lower + kRun});
    lows.push_back(lower);
    highs.push_back(lower + kRun);
  }
  std::vector<uint32_t> unpaired;
  if (groups % 2) unpaired.push_back(static_cast<uint32_t>(kRun * (groups - 1)));
  if (rest) unpaired.push_back(static_cast<uint32_t>(kRun * groups));
  for (uint32_t run : unpaired) {
    merges.push_back({lows[0], run});
    highs.push_back(run);  // ascending: the partial group, highest of all, stays last
  }
  for (size_t i = 1; i < lows.size(); ++i) merges.push_back({lows[0], lows[i]});
  for (size_t i = 1; i < highs.size(); ++i) merges.push_back({highs[i - 1], highs[i]});
  // Each merge in full (the flip, then the half-cleaners of both sides); ReachingRanks prunes it.
  std::vector<Comparator> net;
  for (const auto [lo, hi] : merges) {
    for (uint32_t i = 0; i < kRun; ++i) net.emplace_back(lo + i, hi + kRun - 1 - i);
    for (uint32_t d = kRun / 2; d >= 1; d >>= 1) {
      for (const uint32_t side : {lo, hi}) {
        for (uint32_t base = side; base < side + kRun; base += 2 * d) {
          for (uint32_t i = 0; i < d; ++i) net.emplace_back(base + i, base + i + d);
        }
      }
    }
  }
  // The wires the asked ranks end on: the lowest 16 on the first lower run; the highest 16 on
  // the last upper run, or with a partial group of `rest` rows, on its `rest` wires and the top
  // 16 - rest of the upper run merged with it last (its lower side).
  std::vector<uint32_t> top;
  if (rest) {
    for (uint32_t i = 0; i < kRun; ++i) top.push_back(highs[highs.size() - 2] + i);
  }
  for (uint32_t i = 0; i < kRun && highs.back() + i < n; ++i) top.push_back(highs.back() + i);
  top.erase(top.begin(), top.end() - kRun);
  MergePlan plan;
  plan.order.assign(n, 0);
  std::vector<bool> exact(n, false);
  for (uint32_t i = 0; i < kRun; ++i) {
    plan.order[i] = lows[0] + i;
    plan.order[n - kRun + i] = top[i];
    exact[lows[0] + i] = exact[top[i]] = true;
  }
  for (uint32_t w = 0, r = kRun; w < n; ++w) {
    if (!exact[w]) plan.order[r++] = w;
  }
  std::vector<uint32_t> rank_wires;
  for (uint32_t r : ranks) rank_wires.push_back(plan.order[r]);
  const std::vector<bool> needed = ReachingRanks(net, kRun * (groups + (rest ? 1 : 0)), n, rank_wires);
  // The tiles, merge by merge: the flip with the next two half-cleaners over sets of eight, then
  // the last two half-cleaners over sets of four, two sets to a tile.
  auto row = [n](uint32_t w) { return std::min<uint32_t>(w, static_cast<uint32_t>(n)); };
  size_t c = 0;
  for (const auto [lo, hi] : merges) {
    std::map<Comparator, bool> is_needed;
    for (size_t end = c + 5 * kRun; c < end; ++c) is_needed[net[c]] = needed[c];
    auto any = [&](const uint32_t* w, std::initializer_list<std::pair<int, int>> places) {
      bool found = false;
      for (const auto& [a, b] : places) found = found || is_needed.at({w[a], w[b]});
      return found;
    };
    for (uint32_t i = 0; i < 4; ++i) {
      const uint32_t w[8] = {lo + i,     lo + i + 4, lo + i + 8,  lo + i + 12,
                             hi + 3 - i, hi + 7 - i, hi + 11 - i, hi + 15 - i};
      const bool mirror = any(w, {{0, 7}, {1, 6}, {2, 5}, {3, 4}});
      const bool lower = any(w, {{0, 2}, {1, 3}, {0, 1}, {2, 3}});
      const bool upper = any(w, {{4, 6}, {5, 7}, {4, 5}, {6, 7}});
      if (!mirror && !lower && !upper) continue;
      simd::ComparatorTile tile;
      for (size_t p = 0; p < 8; ++p) tile.rows[p] = row(w[p]);
      tile.layers = lower && upper ? simd::TileLayers::kMirrorHalf2Half1
                    : upper        ? simd::TileLayers::kMirrorHalf2Half1Upper
                                   : simd::TileLayers::kMirrorHalf2Half1Lower;
      plan.tiles.push_back(tile);
    }
    std::vector<uint32_t> fours;
    for (const uint32_t side : {lo, hi}) {
      for (uint32_t first = side; first < side + kRun; first += 4) {
        const uint32_t w[4] = {first, first + 1, first + 2, first + 3};
        if (any(w, {{0, 2}, {1, 3}, {0, 1}, {2, 3}})) fours.push_back(first);
      }
    }
    for (size_t f = 0; f < fours.size(); f += 2) {
      simd::ComparatorTile tile;
      for (uint32_t p = 0; p < 8; ++p) {
        // An odd set out is paired with four copies of the +infinity row, which no comparator moves.
        tile.rows[p] = p < 4                  ? row(fours[f] + p)
                       : f + 1 < fours.size() ? row(fours[f + 1] + p - 4)
                                              : static_cast<uint32_t>(n);
      }
      tile.layers = simd::TileLayers::kHalf2Half1;
      plan.tiles.push_back(tile);
    }
  }
  return plan;
}

// The cheaper of the two plans where both apply.
MergePlan PlanCheapestMerges(size_t n, std::span<const uint32_t> ranks) {
  MergePlan whole = PlanMerges(n, ranks);
  std::optional<MergePlan> tails = PlanTailMerges(n, ranks);
  if (tails && Cost(*tails) < Cost(whole)) return *std::move(tails);
  return whole;
}

}  // namespace

std::vector<Comparator> SortingNetwork(size_t n) {
  std::vector<Comparator> net;
  ForEachBatcherComparator(
      n, [&](size_t a, size_t b) { net.emplace_back(static_cast<uint32_t>(a), static_cast<uint32_t>(b)); });
  return net;
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
  // The n rows of a block: within about 32 KiB (L1) under 16 rows, where the reducer reads the
  // sorted rows straight after the kernel wrote them (128 KiB blocks measured no faster there),
  // about 512 KiB (L2) from 16 rows, where the tiles load each value once per three layers: each
  // block reads a run of every input, and with 100 inputs a run of 128 KiB / 100 (1.3 KB) was too
  // short for the prefetchers to stream; 512 KiB blocks (5 KB runs) sorted the median of 100 on
  // one thread 15-30% faster (1 and 4 MiB no faster again: docs/benchmarks.md).
  const size_t block_floats = n < 16 ? 8192 : 131072;
  const size_t block = std::max<size_t>(16, (block_floats / n) & ~size_t{7});
  const size_t blocks = (p + block - 1) / block;
  // Each aligned group of 16 rows sorted in registers as it is read in (simd::SortGroupsOf16),
  // the last n % 16 rows likewise by Batcher's network for them (simd::SortRowsUnder16), then,
  // from 16 rows, the merges of PlanCheapestMerges.
  const size_t groups = n / 16, rest = n % 16;
  const MergePlan merges = groups == 0 ? MergePlan{} : PlanCheapestMerges(n, ranks);
  ForRanges(
      pool, blocks,
      [&](size_t b_begin, size_t b_end) {
        std::vector<float> storage((n + 1) * block);  // row n: +infinity, for the merges' missing rows
        std::fill(storage.begin() + static_cast<ptrdiff_t>(n * block), storage.end(),
                  std::numeric_limits<float>::infinity());
        std::vector<float*> rows(n);
        std::vector<const float*> inputs(n);
        for (size_t i = 0; i < n; ++i) rows[i] = storage.data() + (merges.order.empty() ? i : merges.order[i]) * block;
        for (size_t b = b_begin; b < b_end; ++b) {
          const size_t begin = b * block, len = std::min(block, p - begin);
          for (size_t i = 0; i < n; ++i) inputs[i] = deltas[i] + begin;
          simd::SortGroupsOf16(storage.data(), block, inputs.data(), groups, len);
          simd::SortRowsUnder16(storage.data() + 16 * groups * block, block, inputs.data() + 16 * groups, rest, len);
          simd::ApplyComparatorTiles(storage.data(), block, merges.tiles.data(), merges.tiles.size(), len);
          simd::ApplyComparators(storage.data(), block, merges.pairs.data(), merges.pairs.size() / 2, len);
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
