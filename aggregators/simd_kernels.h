// The inner loops of aggregation over float32 deltas. On x86-64 with GCC each is compiled three
// times (AVX-512, AVX2, and the SSE2 baseline) and the dynamic loader picks the widest
// the CPU supports, so one binary runs everywhere and uses what it finds; other targets (ARM64,
// RISC-V, clang builds) get the one baseline build. Every build gives the same bits: the library
// is compiled without fused multiply-adds and reductions use a fixed number of partial sums.
// Stateless and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace plexus::simd {

// acc[j] += w * x[j] for j < len.
void AccumulateScaled(double* acc, const float* x, size_t len, double w);

// acc[j] += w[0] x[0][j] + ... + w[count-1] x[count-1][j], added in that order, 1 <= count <= 4;
// `store` overwrites acc instead of adding to it. The bits of StoreScaled and AccumulateScaled
// applied one input at a time, in one pass over acc instead of `count`.
void WeightedSumUpTo4(double* acc, const float* const* x, const double* w, size_t count, size_t len, bool store);

// out[j] = w * x[j].
void StoreScaled(double* out, const float* x, size_t len, double w);

// Whether any value is NaN or infinite.
bool AnyNonFinite(const float* x, size_t len);
bool AnyNonFinite(const double* x, size_t len);

// dst[j] = src[j]. Returns true if any src[j] is NaN or infinite.
bool CopyCheckingFinite(float* dst, const float* src, size_t len);

// out[j] = base[j] + k * sum[j], rounded to float.
void ApplyScaledSum(float* out, const float* base, const double* sum, double k, size_t len);

// The comparator kernels below (ApplyComparators, SortGroupsOf16, SortRowsUnder16,
// ApplyComparatorTiles) are written three times with the same bits: portable C++ (GCC's vector
// type: NEON, SSE2, whatever the target has), AVX2 (eight columns at a time) and AVX-512 (sixteen,
// with 32 registers); each takes the widest the CPU runs, or the one asked for.
enum class ComparatorIsa { kPortable, kAvx2, kAvx512 };
// Whether this CPU (and this build's target) runs `isa`'s kernels; kPortable always.
bool CpuRuns(ComparatorIsa isa);

// Applies a comparator network column by column to rows[i] = block + i * stride, each len
// floats: for each comparator (a, b) = (pairs[2c], pairs[2c + 1]) in order, (rows[a][j], rows[b][j])
// becomes (min, max): swapped when rows[b][j] < rows[a][j], else left (a permutation of each
// column's bits: of +0 and -0 neither is lost).
void ApplyComparators(float* block, size_t stride, const uint32_t* pairs, size_t count, size_t len);
// With the kernels of `isa` (the portable ones where !CpuRuns(isa)): the same bits (tests).
void ApplyComparators(ComparatorIsa isa, float* block, size_t stride, const uint32_t* pairs, size_t count, size_t len);

// Rows come in groups of 16: for each group g < groups, block + (16g + i) * stride, i < 16, becomes
// rows[16g + i] (len floats each) sorted column by column, the smallest in row 16g: the values
// ApplyComparators gives with Batcher's network for 16 (each column's values sorted), with the 16
// rows of eight or sixteen columns held in registers, one load and one store per value instead
// of two of each per comparator.
void SortGroupsOf16(float* block, size_t stride, const float* const* rows, size_t groups, size_t len);
void SortGroupsOf16(ComparatorIsa isa, float* block, size_t stride, const float* const* rows, size_t groups,
                    size_t len);

// rows[i] (len floats each) become block + i * stride, i < n, sorted column by column, the
// smallest in row 0, by Batcher's network for n wires held in registers (one load and one store
// per value, and no copy of the rows before the network runs). REQUIRES: n < 16.
void SortRowsUnder16(float* block, size_t stride, const float* const* rows, size_t n, size_t len);
void SortRowsUnder16(ComparatorIsa isa, float* block, size_t stride, const float* const* rows, size_t n, size_t len);

// Layers of comparators over eight rows of a block, by the rows' places in the tile (0..7); in
// every layer the smaller value goes to the lower place, swapped only when the higher place holds
// the smaller value (as ApplyComparators does):
//   mirror: (0,7) (1,6) (2,5) (3,4)      half4: (0,4) (1,5) (2,6) (3,7)
//   half2:  (0,2) (1,3) (4,6) (5,7)      half1: (0,1) (2,3) (4,5) (6,7)
enum class TileLayers : uint32_t {
  kMirrorHalf2Half1,  // the first three layers of a bitonic merge
  kHalf4Half2Half1,   // three half-cleaners
  kHalf2Half1Mirror,  // the last two half-cleaners of one merge and the first layer of the next
  // mirror, then half2 and half1 over places 0..3 only (upper: 4..7 only): the first three layers
  // of a bitonic merge of which one side's values are kept
  kMirrorHalf2Half1Lower,
  kMirrorHalf2Half1Upper,
  kHalf2Half1,  // two layers: places 0..3 and 4..7 are two independent sets of four
};
// The comparators a tile of each shape runs: twelve for three full layers, eight for the others.
constexpr size_t TileComparators(TileLayers layers) {
  return layers == TileLayers::kMirrorHalf2Half1 || layers == TileLayers::kHalf4Half2Half1 ||
                 layers == TileLayers::kHalf2Half1Mirror
             ? 12
             : 8;
}
// Eight rows, block + rows[i] * stride (i < 8; a row may appear more than once only if the tile's
// comparators cannot change it, as a row of +infinity standing for missing ones).
struct ComparatorTile {
  uint32_t rows[8];
  TileLayers layers;
};
// For each tile in order: its eight rows' first len floats, column by column, through its
// layers. With AVX2 or AVX-512 each tile's rows of eight or sixteen columns are held in
// registers: one load and one store per value for eight or twelve comparators, instead of two of
// each per comparator.
void ApplyComparatorTiles(float* block, size_t stride, const ComparatorTile* tiles, size_t count, size_t len);
void ApplyComparatorTiles(ComparatorIsa isa, float* block, size_t stride, const ComparatorTile* tiles, size_t count,
                          size_t len);

// sum_j a[j] * b[j] in float (callers keep len to a cache block and add the blocks in double).
float Dot(const float* a, const float* b, size_t len);

// out[r] = Dot(a, b[r], len) for r < 4, with a read once and four independent accumulators
// (one dot product alone waits on its own additions).
void Dot4(const float* a, const float* const* b, size_t len, float* out);

// sum_j x[j]^2 in double.
double SquaredNorm(const float* x, size_t len);

}  // namespace plexus::simd
