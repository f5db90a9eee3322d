// Coordinate-wise order statistics over buffered updates. Coordinates are processed in blocks
// small enough that the n rows of a block stay in L1; each block is sorted column by column with
// a Batcher odd-even merge network whose compare-exchanges are vectorized across the block's
// coordinates (no per-coordinate sorting or branching), in parallel over blocks. The reducer
// then reads the sorted rows. Results do not depend on the thread count. Stateless.
#pragma once

#include <span>
#include <vector>

#include "aggregators/update_buffer.h"
#include "core/thread_pool.h"

namespace plexus {

// Called once per block: rows[0..n) are the block's values sorted per coordinate
// (rows[0][c] <= rows[1][c] <= ...), each `len` long; writes out[0..len).
using SortedBlockReducer = void (*)(const float* const* rows, size_t n, size_t len, double* out, const void* arg);

// `deltas` point at the updates' data, each `num_params` long.
std::vector<double> ReduceSortedCoordinates(std::span<const float* const> deltas, size_t num_params, ThreadPool* pool,
                                            SortedBlockReducer reduce, const void* arg);

// The comparators of a Batcher odd-even merge sorting network for n inputs (pairs i < j),
// pruned to indices below n. Exposed for tests.
std::vector<std::pair<uint32_t, uint32_t>> SortingNetwork(size_t n);

// Median of values[0..n) (mean of the two middle values for even n); reorders values.
double MedianInPlace(float* values, size_t n);

}  // namespace plexus
