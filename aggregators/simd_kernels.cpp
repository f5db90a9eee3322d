#include "aggregators/simd_kernels.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>

#include "aggregators/batcher_network.h"
#include "core/simd_clones.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace plexus::simd {
namespace {

// x * 0 is 0 for every finite x and NaN for NaN and both infinities; this form vectorizes where
// std::isfinite does not.
inline int NonFinite(float x) { return !(x * 0.0f == 0.0f); }

}  // namespace

PLEXUS_SIMD_CLONES void AccumulateScaled(double* __restrict acc, const float* __restrict x, size_t len, double w) {
#pragma omp simd
  for (size_t j = 0; j < len; ++j) acc[j] += w * static_cast<double>(x[j]);
}

namespace {

// acc[j] (+)= w[0] x[0][j] + ... + w[K-1] x[K-1][j], added in that order; kStore overwrites acc
// instead of adding to it. Inlined into each instruction set's clone of its caller.
template <size_t K, bool kStore>
inline void WeightedSum(double* __restrict acc, const float* const* x, const double* w, size_t len) {
  const float* __restrict x0 = x[0];
  const float* __restrict x1 = x[K > 1 ? 1 : 0];
  const float* __restrict x2 = x[K > 2 ? 2 : 0];
  const float* __restrict x3 = x[K > 3 ? 3 : 0];
  const double w0 = w[0], w1 = w[K > 1 ? 1 : 0], w2 = w[K > 2 ? 2 : 0], w3 = w[K > 3 ? 3 : 0];
#pragma omp simd
  for (size_t j = 0; j < len; ++j) {
    double a = kStore ? w0 * static_cast<double>(x0[j]) : acc[j] + w0 * static_cast<double>(x0[j]);
    if constexpr (K > 1) a += w1 * static_cast<double>(x1[j]);
    if constexpr (K > 2) a += w2 * static_cast<double>(x2[j]);
    if constexpr (K > 3) a += w3 * static_cast<double>(x3[j]);
    acc[j] = a;
  }
}

template <bool kStore>
inline void WeightedSumOf(double* acc, const float* const* x, const double* w, size_t count, size_t len) {
  switch (count) {
    case 1:
      return WeightedSum<1, kStore>(acc, x, w, len);
    case 2:
      return WeightedSum<2, kStore>(acc, x, w, len);
    case 3:
      return WeightedSum<3, kStore>(acc, x, w, len);
    default:
      return WeightedSum<4, kStore>(acc, x, w, len);
  }
}

}  // namespace

PLEXUS_SIMD_CLONES void WeightedSumUpTo4(double* acc, const float* const* x, const double* w, size_t count, size_t len,
                                         bool store) {
  if (store) {
    WeightedSumOf<true>(acc, x, w, count, len);
  } else {
    WeightedSumOf<false>(acc, x, w, count, len);
  }
}

PLEXUS_SIMD_CLONES void StoreScaled(double* __restrict out, const float* __restrict x, size_t len, double w) {
#pragma omp simd
  for (size_t j = 0; j < len; ++j) out[j] = w * static_cast<double>(x[j]);
}

PLEXUS_SIMD_CLONES bool AnyNonFinite(const float* x, size_t len) {
  int bad = 0;
#pragma omp simd reduction(| : bad)
  for (size_t j = 0; j < len; ++j) bad |= NonFinite(x[j]);
  return bad != 0;
}

PLEXUS_SIMD_CLONES bool AnyNonFinite(const double* x, size_t len) {
  int bad = 0;
#pragma omp simd reduction(| : bad)
  for (size_t j = 0; j < len; ++j) bad |= !(x[j] * 0.0 == 0.0);
  return bad != 0;
}

PLEXUS_SIMD_CLONES bool CopyCheckingFinite(float* __restrict dst, const float* __restrict src, size_t len) {
  int bad = 0;
#pragma omp simd reduction(| : bad)
  for (size_t j = 0; j < len; ++j) {
    bad |= NonFinite(src[j]);
    dst[j] = src[j];
  }
  return bad != 0;
}

PLEXUS_SIMD_CLONES void ApplyScaledSum(float* __restrict out, const float* __restrict base,
                                       const double* __restrict sum, double k, size_t len) {
#pragma omp simd
  for (size_t j = 0; j < len; ++j) out[j] = static_cast<float>(static_cast<double>(base[j]) + k * sum[j]);
}

namespace {

// The portable comparator: b < a ? swap : keep (std::min(a, b) and std::max(b, a) say just that),
// so that equal values (+0 and -0) stay where they are, as in SortGroupsOf16.
void ApplyComparatorsPortable(float* block, size_t stride, const uint32_t* pairs, size_t count, size_t len) {
  for (size_t c = 0; c < count; ++c) {
    float* __restrict lo = block + pairs[2 * c] * stride;
    float* __restrict hi = block + pairs[2 * c + 1] * stride;
#pragma omp simd
    for (size_t j = 0; j < len; ++j) {
      const float a = lo[j], b = hi[j];
      lo[j] = std::min(a, b);
      hi[j] = std::max(b, a);
    }
  }
}

// Batcher's networks for up to 16 wires, at compile time: their comparators are unrolled with
// constant indices, so that the rows stay in registers.
struct Pair {
  uint8_t a, b;
};
constexpr size_t BatcherSize(size_t n) {
  size_t count = 0;
  ForEachBatcherComparator(n, [&](size_t, size_t) { ++count; });
  return count;
}
template <size_t N>
constexpr std::array<Pair, BatcherSize(N)> kBatcher = [] {
  std::array<Pair, BatcherSize(N)> net{};
  size_t count = 0;
  ForEachBatcherComparator(N, [&](size_t a, size_t b) {
    net[count++] = {static_cast<uint8_t>(a), static_cast<uint8_t>(b)};
  });
  return net;
}();
static_assert(kBatcher<16>.size() == 63);  // Knuth's count for 16 wires

typedef float Vec8 __attribute__((vector_size(32)));

// A network over registers, its comparators unrolled with constant indices.
template <const auto& kNet, size_t... I>
inline void RunNet([[maybe_unused]] Vec8* r, std::index_sequence<I...>) {
  (
      [&] {
        const Vec8 x = r[kNet[I].a], y = r[kNet[I].b];
        r[kNet[I].a] = y < x ? y : x;
        r[kNet[I].b] = y < x ? x : y;
      }(),
      ...);
}

template <size_t N>
void SortRowsPortable(float* block, size_t stride, const float* const* rows, size_t len) {
  for (size_t j = 0; j < len; j += 8) {
    const size_t w = std::min<size_t>(8, len - j);
    Vec8 r[N + 1];
    for (size_t i = 0; i < N; ++i) {
      r[i] = Vec8{};  // in the last few columns the spare lanes sort zeros and are not stored
      std::memcpy(&r[i], rows[i] + j, w * sizeof(float));
    }
    RunNet<kBatcher<N>>(r, std::make_index_sequence<kBatcher<N>.size()>());
    for (size_t i = 0; i < N; ++i) std::memcpy(block + i * stride + j, &r[i], w * sizeof(float));
  }
}

template <size_t... N>
constexpr auto SortRowsPortableTable(std::index_sequence<N...>) {
  return std::array{&SortRowsPortable<N>...};
}
constexpr auto kSortRowsPortable = SortRowsPortableTable(std::make_index_sequence<16>());

void SortRowsUnder16Portable(float* block, size_t stride, const float* const* rows, size_t n, size_t len) {
  kSortRowsPortable[n](block, stride, rows, len);
}

// Any CPU: GCC turns the selects above into a compare and two blends per comparator.
void SortGroupsOf16Portable(float* block, size_t stride, const float* const* rows, size_t groups, size_t len) {
  for (size_t g = 0; g < groups; ++g) SortRowsPortable<16>(block + 16 * g * stride, stride, rows + 16 * g, len);
}

// Each tile shape's comparators in the order they run, by place in the tile (the layers of
// simd_kernels.h: mirror (0,7) (1,6) (2,5) (3,4), half4, half2, half1; "lower" and "upper" keep a
// layer's comparators within places 0..3 or 4..7).
template <size_t N>
using TileNet = std::array<Pair, N>;
constexpr TileNet<12> kMirrorHalf2Half1Net = {
    {{0, 7}, {1, 6}, {2, 5}, {3, 4}, {0, 2}, {1, 3}, {4, 6}, {5, 7}, {0, 1}, {2, 3}, {4, 5}, {6, 7}}};
constexpr TileNet<12> kHalf4Half2Half1Net = {
    {{0, 4}, {1, 5}, {2, 6}, {3, 7}, {0, 2}, {1, 3}, {4, 6}, {5, 7}, {0, 1}, {2, 3}, {4, 5}, {6, 7}}};
constexpr TileNet<12> kHalf2Half1MirrorNet = {
    {{0, 2}, {1, 3}, {4, 6}, {5, 7}, {0, 1}, {2, 3}, {4, 5}, {6, 7}, {0, 7}, {1, 6}, {2, 5}, {3, 4}}};
constexpr TileNet<8> kMirrorHalf2Half1LowerNet = {{{0, 7}, {1, 6}, {2, 5}, {3, 4}, {0, 2}, {1, 3}, {0, 1}, {2, 3}}};
constexpr TileNet<8> kMirrorHalf2Half1UpperNet = {{{0, 7}, {1, 6}, {2, 5}, {3, 4}, {4, 6}, {5, 7}, {4, 5}, {6, 7}}};
constexpr TileNet<8> kHalf2Half1Net = {{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {0, 1}, {2, 3}, {4, 5}, {6, 7}}};
static_assert(kMirrorHalf2Half1Net.size() == TileComparators(TileLayers::kMirrorHalf2Half1) &&
              kHalf4Half2Half1Net.size() == TileComparators(TileLayers::kHalf4Half2Half1) &&
              kHalf2Half1MirrorNet.size() == TileComparators(TileLayers::kHalf2Half1Mirror) &&
              kMirrorHalf2Half1LowerNet.size() == TileComparators(TileLayers::kMirrorHalf2Half1Lower) &&
              kMirrorHalf2Half1UpperNet.size() == TileComparators(TileLayers::kMirrorHalf2Half1Upper) &&
              kHalf2Half1Net.size() == TileComparators(TileLayers::kHalf2Half1));

// Eight columns at a time in GCC's vector type (NEON, SSE2, or whatever the target has), as the
// portable group sort does: in the last few columns the spare lanes sort zeros and are not stored.
template <const auto& kNet>
void TileColumnsPortable(float* const* p, size_t begin, size_t end) {
  for (size_t j = begin; j < end; j += 8) {
    const size_t w = std::min<size_t>(8, end - j);
    Vec8 r[8];
    for (size_t i = 0; i < 8; ++i) {
      r[i] = Vec8{};
      std::memcpy(&r[i], p[i] + j, w * sizeof(float));
    }
    RunNet<kNet>(r, std::make_index_sequence<kNet.size()>());
    for (size_t i = 0; i < 8; ++i) std::memcpy(p[i] + j, &r[i], w * sizeof(float));
  }
}

// By TileLayers' value.
constexpr void (*kTileColumnsPortable[])(float* const*, size_t, size_t) = {
    &TileColumnsPortable<kMirrorHalf2Half1Net>,      &TileColumnsPortable<kHalf4Half2Half1Net>,
    &TileColumnsPortable<kHalf2Half1MirrorNet>,      &TileColumnsPortable<kMirrorHalf2Half1LowerNet>,
    &TileColumnsPortable<kMirrorHalf2Half1UpperNet>, &TileColumnsPortable<kHalf2Half1Net>};

static_assert(std::size(kTileColumnsPortable) == static_cast<size_t>(TileLayers::kHalf2Half1) + 1,
              "one kernel per TileLayers value, in the enum's order");

void TileColumnsPortable(TileLayers layers, float* const* p, size_t begin, size_t end) {
  kTileColumnsPortable[static_cast<size_t>(layers)](p, begin, end);
}

void TileRows(float* block, size_t stride, const ComparatorTile& tile, float** p) {
  for (size_t i = 0; i < 8; ++i) p[i] = block + static_cast<size_t>(tile.rows[i]) * stride;
}

void ApplyComparatorTilesPortable(float* block, size_t stride, const ComparatorTile* tiles, size_t count, size_t len) {
  for (size_t t = 0; t < count; ++t) {
    float* p[8];
    TileRows(block, stride, tiles[t], p);
    TileColumnsPortable(tiles[t].layers, p, 0, len);
  }
}

#if defined(__x86_64__)
// The same network with AVX's min and max: one instruction per output instead of GCC's compare
// and blend for the select (a third fewer instructions, and fewer registers spilled): a quarter
// to a third less of the group sort's time, measured. The same bits: minps(y, x) is
// y < x ? y : x and maxps(x, y) is x > y ? x : y by definition, signed zeros included.
#define PLEXUS_AVX2 __attribute__((target("avx2")))
template <const auto& kNet, size_t I>
PLEXUS_AVX2 __attribute__((always_inline)) inline void CompareAvx2(__m256* r) {
  const __m256 x = r[kNet[I].a], y = r[kNet[I].b];
  r[kNet[I].a] = _mm256_min_ps(y, x);
  r[kNet[I].b] = _mm256_max_ps(x, y);
}
template <const auto& kNet, size_t... I>
PLEXUS_AVX2 __attribute__((always_inline)) inline void RunNetAvx2([[maybe_unused]] __m256* r,
                                                                  std::index_sequence<I...>) {
  (CompareAvx2<kNet, I>(r), ...);
}
// Eight columns at a time; the last len % 8 columns go through the portable kernel (the same bits).
template <size_t N>
PLEXUS_AVX2 void SortRowsAvx2(float* block, size_t stride, const float* const* rows, size_t len) {
  const size_t full = len / 8 * 8;
  for (size_t j = 0; j < full; j += 8) {
    __m256 r[N + 1];
    for (size_t i = 0; i < N; ++i) r[i] = _mm256_loadu_ps(rows[i] + j);
    RunNetAvx2<kBatcher<N>>(r, std::make_index_sequence<kBatcher<N>.size()>());
    for (size_t i = 0; i < N; ++i) _mm256_storeu_ps(block + i * stride + j, r[i]);
  }
  if (full < len) {
    const float* rest[N + 1];
    for (size_t i = 0; i < N; ++i) rest[i] = rows[i] + full;
    SortRowsPortable<N>(block + full, stride, rest, len - full);
  }
}
template <size_t... N>
constexpr auto SortRowsAvx2Table(std::index_sequence<N...>) {
  return std::array{&SortRowsAvx2<N>...};
}
constexpr auto kSortRowsAvx2 = SortRowsAvx2Table(std::make_index_sequence<16>());
PLEXUS_AVX2 void SortGroupsOf16Avx2(float* block, size_t stride, const float* const* rows, size_t groups, size_t len) {
  for (size_t g = 0; g < groups; ++g) SortRowsAvx2<16>(block + 16 * g * stride, stride, rows + 16 * g, len);
}

// GCC compiles the portable loop above into a compare and a branch that skips the stores when no
// lane swaps: a branch on the data. This one always stores, with the same bits.
PLEXUS_AVX2 void ApplyComparatorsAvx2(float* block, size_t stride, const uint32_t* pairs, size_t count, size_t len) {
  for (size_t c = 0; c < count; ++c) {
    float* __restrict lo = block + pairs[2 * c] * stride;
    float* __restrict hi = block + pairs[2 * c + 1] * stride;
    size_t j = 0;
    for (; j + 8 <= len; j += 8) {
      const __m256 a = _mm256_loadu_ps(lo + j), b = _mm256_loadu_ps(hi + j);
      _mm256_storeu_ps(lo + j, _mm256_min_ps(b, a));
      _mm256_storeu_ps(hi + j, _mm256_max_ps(a, b));
    }
    for (; j < len; ++j) {
      const float a = lo[j], b = hi[j];
      lo[j] = b < a ? b : a;
      hi[j] = b < a ? a : b;
    }
  }
}
template <const auto& kNet>
PLEXUS_AVX2 void TileColumnsAvx2(float* const* rows, size_t full) {
  float* p[8];  // a copy GCC keeps in registers: through `rows` it reloads each after every store
  for (size_t i = 0; i < 8; ++i) p[i] = rows[i];
  for (size_t j = 0; j < full; j += 8) {
    __m256 r[8];
    for (size_t i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(p[i] + j);
    RunNetAvx2<kNet>(r, std::make_index_sequence<kNet.size()>());
    for (size_t i = 0; i < 8; ++i) _mm256_storeu_ps(p[i] + j, r[i]);
  }
}

// By TileLayers' value.
constexpr void (*kTileColumnsAvx2[])(float* const*, size_t) = {
    &TileColumnsAvx2<kMirrorHalf2Half1Net>,      &TileColumnsAvx2<kHalf4Half2Half1Net>,
    &TileColumnsAvx2<kHalf2Half1MirrorNet>,      &TileColumnsAvx2<kMirrorHalf2Half1LowerNet>,
    &TileColumnsAvx2<kMirrorHalf2Half1UpperNet>, &TileColumnsAvx2<kHalf2Half1Net>};

static_assert(std::size(kTileColumnsAvx2) == std::size(kTileColumnsPortable));

// Eight columns at a time; the last len % 8 columns go through the portable loop (the same bits).
PLEXUS_AVX2 void ApplyComparatorTilesAvx2(float* block, size_t stride, const ComparatorTile* tiles, size_t count,
                                          size_t len) {
  const size_t full = len / 8 * 8;
  for (size_t t = 0; t < count; ++t) {
    float* p[8];
    TileRows(block, stride, tiles[t], p);
    kTileColumnsAvx2[static_cast<size_t>(tiles[t].layers)](p, full);
    if (full < len) TileColumnsPortable(tiles[t].layers, p, full, len);
  }
}
#undef PLEXUS_AVX2

// The same kernels sixteen columns at a time with AVX-512: 32 registers, so that the group of 16
// rows and the network's temporaries stay in registers, and half the instructions per value.
#define PLEXUS_AVX512 __attribute__((target("avx512f")))
// _mm512_min_ps(y, x) and _mm512_max_ps(x, y) with every lane written: GCC 12's own forms pass an
// uninitialized register as the unused merge source, which -Wmaybe-uninitialized reports.
PLEXUS_AVX512 __attribute__((always_inline)) inline __m512 Min512(__m512 y, __m512 x) {
  return _mm512_mask_min_ps(y, static_cast<__mmask16>(0xffff), y, x);
}
PLEXUS_AVX512 __attribute__((always_inline)) inline __m512 Max512(__m512 x, __m512 y) {
  return _mm512_mask_max_ps(x, static_cast<__mmask16>(0xffff), x, y);
}
template <const auto& kNet, size_t I>
PLEXUS_AVX512 __attribute__((always_inline)) inline void CompareAvx512(__m512* r) {
  const __m512 x = r[kNet[I].a], y = r[kNet[I].b];
  r[kNet[I].a] = Min512(y, x);
  r[kNet[I].b] = Max512(x, y);
}
template <const auto& kNet, size_t... I>
PLEXUS_AVX512 __attribute__((always_inline)) inline void RunNetAvx512([[maybe_unused]] __m512* r,
                                                                      std::index_sequence<I...>) {
  (CompareAvx512<kNet, I>(r), ...);
}
// Sixteen columns at a time; the last len % 16 columns go through the AVX2 kernel (the same bits).
template <size_t N>
PLEXUS_AVX512 void SortRowsAvx512(float* block, size_t stride, const float* const* rows, size_t len) {
  const size_t full = len / 16 * 16;
  for (size_t j = 0; j < full; j += 16) {
    __m512 r[N + 1];
    for (size_t i = 0; i < N; ++i) r[i] = _mm512_loadu_ps(rows[i] + j);
    RunNetAvx512<kBatcher<N>>(r, std::make_index_sequence<kBatcher<N>.size()>());
    for (size_t i = 0; i < N; ++i) _mm512_storeu_ps(block + i * stride + j, r[i]);
  }
  if (full < len) {
    const float* rest[N + 1];
    for (size_t i = 0; i < N; ++i) rest[i] = rows[i] + full;
    SortRowsAvx2<N>(block + full, stride, rest, len - full);
  }
}
template <size_t... N>
constexpr auto SortRowsAvx512Table(std::index_sequence<N...>) {
  return std::array{&SortRowsAvx512<N>...};
}
constexpr auto kSortRowsAvx512 = SortRowsAvx512Table(std::make_index_sequence<16>());
PLEXUS_AVX512 void SortGroupsOf16Avx512(float* block, size_t stride, const float* const* rows, size_t groups,
                                        size_t len) {
  for (size_t g = 0; g < groups; ++g) SortRowsAvx512<16>(block + 16 * g * stride, stride, rows + 16 * g, len);
}
PLEXUS_AVX512 void ApplyComparatorsAvx512(float* block, size_t stride, const uint32_t* pairs, size_t count,
                                          size_t len) {
  const size_t full = len / 16 * 16;
  for (size_t c = 0; c < count; ++c) {
    float* __restrict lo = block + pairs[2 * c] * stride;
    float* __restrict hi = block + pairs[2 * c + 1] * stride;
    for (size_t j = 0; j < full; j += 16) {
      const __m512 a = _mm512_loadu_ps(lo + j), b = _mm512_loadu_ps(hi + j);
      _mm512_storeu_ps(lo + j, Min512(b, a));
      _mm512_storeu_ps(hi + j, Max512(a, b));
    }
  }
  if (full < len) ApplyComparatorsAvx2(block + full, stride, pairs, count, len - full);
}
template <const auto& kNet>
PLEXUS_AVX512 void TileColumnsAvx512(float* const* rows, size_t full) {
  float* p[8];
  for (size_t i = 0; i < 8; ++i) p[i] = rows[i];
  for (size_t j = 0; j < full; j += 16) {
    __m512 r[8];
    for (size_t i = 0; i < 8; ++i) r[i] = _mm512_loadu_ps(p[i] + j);
    RunNetAvx512<kNet>(r, std::make_index_sequence<kNet.size()>());
    for (size_t i = 0; i < 8; ++i) _mm512_storeu_ps(p[i] + j, r[i]);
  }
}
constexpr void (*kTileColumnsAvx512[])(float* const*, size_t) = {
    &TileColumnsAvx512<kMirrorHalf2Half1Net>,      &TileColumnsAvx512<kHalf4Half2Half1Net>,
    &TileColumnsAvx512<kHalf2Half1MirrorNet>,      &TileColumnsAvx512<kMirrorHalf2Half1LowerNet>,
    &TileColumnsAvx512<kMirrorHalf2Half1UpperNet>, &TileColumnsAvx512<kHalf2Half1Net>};
static_assert(std::size(kTileColumnsAvx512) == std::size(kTileColumnsPortable));
PLEXUS_AVX512 void ApplyComparatorTilesAvx512(float* block, size_t stride, const ComparatorTile* tiles, size_t count,
                                              size_t len) {
  const size_t full16 = len / 16 * 16, full8 = len / 8 * 8;
  for (size_t t = 0; t < count; ++t) {
    float* p[8];
    TileRows(block, stride, tiles[t], p);
    const size_t shape = static_cast<size_t>(tiles[t].layers);
    kTileColumnsAvx512[shape](p, full16);
    if (full16 < full8) {
      float* q[8];
      for (size_t i = 0; i < 8; ++i) q[i] = p[i] + full16;
      kTileColumnsAvx2[shape](q, full8 - full16);
    }
    if (full8 < len) TileColumnsPortable(tiles[t].layers, p, full8, len);
  }
}
#undef PLEXUS_AVX512

const bool kHasAvx2 = __builtin_cpu_supports("avx2");  // as half_codec.cpp and crc32c.cpp ask
const bool kHasAvx512 = __builtin_cpu_supports("avx512f");
#endif

}  // namespace

bool CpuRuns(ComparatorIsa isa) {
  switch (isa) {
    case ComparatorIsa::kPortable:
      return true;
#if defined(__x86_64__)
    case ComparatorIsa::kAvx2:
      return kHasAvx2;
    case ComparatorIsa::kAvx512:
      return kHasAvx512;
#endif
    default:
      return false;
  }
}

namespace {
const ComparatorIsa kWidest = CpuRuns(ComparatorIsa::kAvx512) ? ComparatorIsa::kAvx512
                              : CpuRuns(ComparatorIsa::kAvx2) ? ComparatorIsa::kAvx2
                                                              : ComparatorIsa::kPortable;
}  // namespace

void SortGroupsOf16([[maybe_unused]] ComparatorIsa isa, float* block, size_t stride, const float* const* rows,
                    size_t groups, size_t len) {
#if defined(__x86_64__)
  if (isa == ComparatorIsa::kAvx512 && kHasAvx512) return SortGroupsOf16Avx512(block, stride, rows, groups, len);
  if (isa == ComparatorIsa::kAvx2 && kHasAvx2) return SortGroupsOf16Avx2(block, stride, rows, groups, len);
#endif
  SortGroupsOf16Portable(block, stride, rows, groups, len);
}

void SortRowsUnder16([[maybe_unused]] ComparatorIsa isa, float* block, size_t stride, const float* const* rows,
                     size_t n, size_t len) {
#if defined(__x86_64__)
  if (isa == ComparatorIsa::kAvx512 && kHasAvx512) return kSortRowsAvx512[n](block, stride, rows, len);
  if (isa == ComparatorIsa::kAvx2 && kHasAvx2) return kSortRowsAvx2[n](block, stride, rows, len);
#endif
  SortRowsUnder16Portable(block, stride, rows, n, len);
}

void ApplyComparators([[maybe_unused]] ComparatorIsa isa, float* block, size_t stride, const uint32_t* pairs,
                      size_t count, size_t len) {
#if defined(__x86_64__)
  if (isa == ComparatorIsa::kAvx512 && kHasAvx512) return ApplyComparatorsAvx512(block, stride, pairs, count, len);
  if (isa == ComparatorIsa::kAvx2 && kHasAvx2) return ApplyComparatorsAvx2(block, stride, pairs, count, len);
#endif
  ApplyComparatorsPortable(block, stride, pairs, count, len);
}

void ApplyComparatorTiles([[maybe_unused]] ComparatorIsa isa, float* block, size_t stride, const ComparatorTile* tiles,
                          size_t count, size_t len) {
#if defined(__x86_64__)
  if (isa == ComparatorIsa::kAvx512 && kHasAvx512) return ApplyComparatorTilesAvx512(block, stride, tiles, count, len);
  if (isa == ComparatorIsa::kAvx2 && kHasAvx2) return ApplyComparatorTilesAvx2(block, stride, tiles, count, len);
#endif
  ApplyComparatorTilesPortable(block, stride, tiles, count, len);
}

void SortGroupsOf16(float* block, size_t stride, const float* const* rows, size_t groups, size_t len) {
  SortGroupsOf16(kWidest, block, stride, rows, groups, len);
}

void SortRowsUnder16(float* block, size_t stride, const float* const* rows, size_t n, size_t len) {
  SortRowsUnder16(kWidest, block, stride, rows, n, len);
}

void ApplyComparators(float* block, size_t stride, const uint32_t* pairs, size_t count, size_t len) {
  ApplyComparators(kWidest, block, stride, pairs, count, len);
}

void ApplyComparatorTiles(float* block, size_t stride, const ComparatorTile* tiles, size_t count, size_t len) {
  ApplyComparatorTiles(kWidest, block, stride, tiles, count, len);
}

// The reductions keep kLanes partial sums whatever the vector width, each summed in index order,
// and add them up in a fixed order at the end: the result does not depend on which build runs.
constexpr size_t kLanes = 16;

PLEXUS_SIMD_CLONES float Dot(const float* a, const float* b, size_t len) {
  float lanes[kLanes] = {};
  size_t j = 0;
  for (; j + kLanes <= len; j += kLanes) {
#pragma omp simd
    for (size_t k = 0; k < kLanes; ++k) lanes[k] += a[j + k] * b[j + k];
  }
  for (; j < len; ++j) lanes[j % kLanes] += a[j] * b[j];
  float s = 0.0f;
  for (float x : lanes) s += x;
  return s;
}

PLEXUS_SIMD_CLONES void Dot4(const float* a, const float* const* b, size_t len, float* out) {
  const float *b0 = b[0], *b1 = b[1], *b2 = b[2], *b3 = b[3];
  float l0[kLanes] = {}, l1[kLanes] = {}, l2[kLanes] = {}, l3[kLanes] = {};
  size_t j = 0;
  for (; j + kLanes <= len; j += kLanes) {
#pragma omp simd
    for (size_t k = 0; k < kLanes; ++k) {
      const float x = a[j + k];
      l0[k] += x * b0[j + k];
      l1[k] += x * b1[j + k];
      l2[k] += x * b2[j + k];
      l3[k] += x * b3[j + k];
    }
  }
  for (; j < len; ++j) {
    l0[j % kLanes] += a[j] * b0[j];
    l1[j % kLanes] += a[j] * b1[j];
    l2[j % kLanes] += a[j] * b2[j];
    l3[j % kLanes] += a[j] * b3[j];
  }
  out[0] = out[1] = out[2] = out[3] = 0.0f;
  for (size_t k = 0; k < kLanes; ++k) {
    out[0] += l0[k];
    out[1] += l1[k];
    out[2] += l2[k];
    out[3] += l3[k];
  }
}

PLEXUS_SIMD_CLONES double SquaredNorm(const float* x, size_t len) {
  double lanes[kLanes] = {};
  size_t j = 0;
  for (; j + kLanes <= len; j += kLanes) {
#pragma omp simd
    for (size_t k = 0; k < kLanes; ++k) lanes[k] += static_cast<double>(x[j + k]) * x[j + k];
  }
  for (; j < len; ++j) lanes[j % kLanes] += static_cast<double>(x[j]) * x[j];
  double s = 0.0;
  for (double v : lanes) s += v;
  return s;
}

}  // namespace plexus::simd
