// Batcher's odd-even merge sort network (Knuth 5.3.4, Algorithm M, iterative form), as one
// constexpr loop: the selection networks of the coordinate-wise rules build theirs from it at
// run time, and the register kernel for groups of 16 rows (simd::SortGroupsOf16) unrolls its
// 16-wire network from it at compile time, so the two cannot drift apart. Stateless.
#pragma once

#include <algorithm>
#include <cstddef>

namespace plexus {

// Calls emit(a, b), a < b, for every comparator of the network that sorts n wires, in the order
// they run. A comparator puts the smaller value on wire a.
template <typename Emit>
constexpr void ForEachBatcherComparator(size_t n, Emit&& emit) {
  size_t size = 1;
  while (size < n) size <<= 1;
  for (size_t p = 1; p < size; p <<= 1) {
    for (size_t k = p; k >= 1; k >>= 1) {
      for (size_t j = k % p; j + k < size; j += 2 * k) {
        for (size_t i = 0; i < std::min(k, size - j - k); ++i) {
          const size_t a = i + j, b = i + j + k;
          if (a / (2 * p) == b / (2 * p) && b < n) emit(a, b);
        }
      }
    }
  }
}

}  // namespace plexus
