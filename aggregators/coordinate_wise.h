// Coordinate-wise order statistics over buffered updates, processed in cache-sized blocks of
// coordinates (each block is transposed so that one coordinate's n values are contiguous) with
// selection (nth_element) rather than full sorts, in parallel over blocks. Stateless.
#pragma once

#include <span>
#include <vector>

#include "aggregators/update_buffer.h"
#include "core/thread_pool.h"

namespace plexus {

// Calls reduce(values, n) for every coordinate with that coordinate's n values (the function
// may reorder them) and stores its result. Results do not depend on the thread count.
std::vector<double> ReduceCoordinates(std::span<const BufferedUpdate> updates, ThreadPool* pool,
                                      double (*reduce)(float* values, size_t n, const void* arg), const void* arg);

// Median of values[0..n) (mean of the two middle values for even n); reorders values.
double MedianInPlace(float* values, size_t n);

}  // namespace plexus
