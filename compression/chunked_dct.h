// ChunkedDct: the orthonormal DCT-II of a vector cut into consecutive chunks of `chunk` values
// (the last one shorter when the length is not a multiple), and its inverse (DCT-III). The `dct`
// codec sends the largest coefficients of each chunk: DeMo's "fast components" (Peng, Quesnelle
// and Kingma 2024, "Decoupled Momentum Optimization"), which move most of a momentum's energy in a
// few coefficients per chunk.
//
// Coefficient j of a chunk x of length N: X_j = sqrt(2/N) c_j sum_n x_n cos(pi (n + 1/2) j / N),
// c_0 = 1/sqrt(2), c_j = 1 otherwise; orthonormal, so the inverse is the transpose and the sum of
// squares is kept. Computed in double from tables of the cosines (O(chunk) per value: chunks are
// small). Immutable after construction; thread-safe.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace plexus {

class ChunkedDct {
 public:
  // REQUIRES: chunk >= 1.
  explicit ChunkedDct(size_t chunk);

  size_t chunk() const { return chunk_; }

  // The coefficients of x's chunks, chunk after chunk, into out (x.size() values).
  void Forward(std::span<const float> x, std::span<double> out) const;
  // The values whose coefficients are `coefficients` (chunk after chunk), into out.
  void Inverse(std::span<const double> coefficients, std::span<float> out) const;

 private:
  // The transform's matrix for a chunk of N values, row j, column n: sqrt(2/N) c_j
  // cos(pi (n + 1/2) j / N), by rows (the inverse adds rows) and by columns (the forward
  // transform adds columns: every coefficient's sum at once, in the order of n).
  struct Tables {
    std::vector<double> rows, columns;
  };
  static Tables Make(size_t n);
  // The tables for a chunk of `n` values: the full chunk's, or `tail` (the last, shorter chunk).
  const Tables& TablesFor(size_t n, Tables* tail) const;

  const size_t chunk_;
  const Tables tables_;
};

}  // namespace plexus
