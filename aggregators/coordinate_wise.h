// Coordinate-wise order statistics over buffered updates. Coordinates are processed in blocks
// small enough that the n rows of a block stay in cache; each block goes column by column through a
// comparator network whose compare-exchanges are vectorized across the block's coordinates (no
// per-coordinate sorting or branching), in parallel over blocks: groups of 16 rows, and the rows
// left over (fewer than 16, Batcher's odd-even merge sort for them), sorted in registers as they
// are read in; from 16 rows, bitonic merges then run three layers at a time over tiles of eight
// rows held in registers, pruned to the comparators that can reach the ranks the reducer needs
// (selection, not a full sort); where every rank asked lies among the lowest or highest 16 (a
// trimmed mean's tails), runs of 16 at the two ends are merged instead, whichever plan costs
// fewer loads, stores and comparators. Results do not depend on the thread count. Stateless.
#pragma once

#include <span>
#include <vector>

#include "aggregators/update_buffer.h"
#include "core/thread_pool.h"

namespace plexus {

// Called once per block with the block's n rows, each `len` long; writes out[0..len). For every
// rank r the caller asked for, rows[r][c] is the r-th smallest value of coordinate c; the other
// rows hold the remaining values of the coordinate in no particular order.
using SortedBlockReducer = void (*)(const float* const* rows, size_t n, size_t len, double* out, const void* arg);

// `deltas` point at the updates' data, each `num_params` long; `ranks` lists the order
// statistics the reducer reads (AllRanks(n) for a full sort).
std::vector<double> ReduceSortedCoordinates(std::span<const float* const> deltas, size_t num_params, ThreadPool* pool,
                                            std::span<const uint32_t> ranks, SortedBlockReducer reduce,
                                            const void* arg);
std::vector<uint32_t> AllRanks(size_t n);

using Comparator = std::pair<uint32_t, uint32_t>;
// The comparators of a Batcher odd-even merge sorting network for n inputs (pairs i < j),
// pruned to indices below n: the network the register kernels unroll at compile time, for tests.
std::vector<Comparator> SortingNetwork(size_t n);

// Median of values[0..n) (mean of the two middle values for even n); reorders values.
double MedianInPlace(float* values, size_t n);

}  // namespace plexus
