#include "compression/chunked_dct.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace plexus {

ChunkedDct::ChunkedDct(size_t chunk) : chunk_(std::max<size_t>(chunk, 1)), tables_(Make(chunk_)) {}

ChunkedDct::Tables ChunkedDct::Make(size_t n) {
  Tables t{.rows = std::vector<double>(n * n), .columns = std::vector<double>(n * n)};
  const double scale = std::sqrt(2.0 / static_cast<double>(n));
  for (size_t j = 0; j < n; ++j) {
    const double c = j == 0 ? std::numbers::sqrt2 / 2 : 1.0;
    for (size_t i = 0; i < n; ++i) {
      t.rows[j * n + i] =
          scale * c *
          std::cos(std::numbers::pi * (static_cast<double>(i) + 0.5) * static_cast<double>(j) / static_cast<double>(n));
      t.columns[i * n + j] = t.rows[j * n + i];
    }
  }
  return t;
}

const ChunkedDct::Tables& ChunkedDct::TablesFor(size_t n, Tables* tail) const {
  if (n == chunk_) return tables_;
  if (tail->rows.size() != n * n) *tail = Make(n);
  return *tail;
}

void ChunkedDct::Forward(std::span<const float> x, std::span<double> out) const {
  Tables tail;
  for (size_t begin = 0; begin < x.size(); begin += chunk_) {
    const size_t n = std::min(chunk_, x.size() - begin);
    const double* columns = TablesFor(n, &tail).columns.data();
    // X_j = sum over i of C[j][i] x_i, each sum in the order of i as the definition reads, but the
    // coefficients side by side: column i of C scaled by x_i is added to all of them. The same
    // products added in the same order give the same bits as one sum at a time, and this loop
    // vectorizes where a sum, a chain of dependent additions, did not (8x over a 64-value chunk).
    double* __restrict sums = out.data() + begin;
    std::fill(sums, sums + n, 0.0);
    for (size_t i = 0; i < n; ++i) {
      const double xi = static_cast<double>(x[begin + i]);
      const double* __restrict column = columns + i * n;
      for (size_t j = 0; j < n; ++j) sums[j] += column[j] * xi;
    }
  }
}

void ChunkedDct::Inverse(std::span<const double> coefficients, std::span<float> out) const {
  Tables tail;
  std::vector<double> values;
  for (size_t begin = 0; begin < coefficients.size(); begin += chunk_) {
    const size_t n = std::min(chunk_, coefficients.size() - begin);
    const std::vector<double>& t = TablesFor(n, &tail).rows;
    values.assign(n, 0.0);
    for (size_t j = 0; j < n; ++j) {
      const double c = coefficients[begin + j];
      if (c == 0.0) continue;  // sparse coefficients (a decoded top-k): most rows add nothing
      for (size_t i = 0; i < n; ++i) values[i] += t[j * n + i] * c;
    }
    for (size_t i = 0; i < n; ++i) out[begin + i] = static_cast<float>(values[i]);
  }
}

}  // namespace plexus
