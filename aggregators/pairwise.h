// Pairwise squared L2 distances between buffered updates, through a blocked Gram matrix:
// one pass over the inputs (each block of coordinates is read once and all n(n+1)/2 dot
// products over it are taken while it is in cache), not n^2 passes. Dot products run in float
// within a block of 2,048 coordinates and are summed in double across blocks, in a fixed block
// order, so the result does not depend on the thread count. Stateless; thread-safe.
#pragma once

#include <span>
#include <vector>

#include "aggregators/update_buffer.h"
#include "core/thread_pool.h"

namespace plexus {

// Row-major n x n matrix of ||u_i - u_j||^2 (zero diagonal).
std::vector<double> PairwiseSquaredDistances(std::span<const BufferedUpdate> updates, ThreadPool* pool);

// Krum scores (Blanchard et al., NeurIPS 2017): for each i in `members`, the sum of its
// `neighbours` smallest squared distances to the other members.
std::vector<double> KrumScores(const std::vector<double>& dist, size_t n, const std::vector<size_t>& members,
                               size_t neighbours);

// The member with the lowest score; ties go to the lowest index (the smallest client id).
size_t ArgMin(const std::vector<double>& scores);

}  // namespace plexus
