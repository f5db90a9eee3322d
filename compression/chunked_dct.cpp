#include "compression/chunked_dct.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/simd_clones.h"

namespace plexus {
namespace {

// sums[j] += columns[i n + j] x[i] for i = 0, 1, ..., n - 1: every sum in the order of i, the
// sums side by side (one vector of them per instruction). The loop is bound by loading and
// storing the sums, so wider vectors (AVX2, AVX-512, chosen at load time) go faster; this file
// compiles without fused multiply-adds, so every width gives the same bits.
PLEXUS_SIMD_CLONES void AddScaledColumns(const double* __restrict columns, const float* __restrict x, size_t n,
                                         double* __restrict sums) {
  for (size_t i = 0; i < n; ++i) {
    const double xi = static_cast<double>(x[i]);
    const double* __restrict column = columns + i * n;
    for (size_t j = 0; j < n; ++j) sums[j] += column[j] * xi;
  }
}

// values[i] += rows[j n + i] c[j] for j = 0, 1, ..., n - 1 where c[j] is not zero (a decoded
// top-k of the coefficients: most rows add nothing); each value's sum in the order of j.
PLEXUS_SIMD_CLONES void AddScaledRows(const double* __restrict rows, const double* __restrict c, size_t n,
                                      double* __restrict values) {
  for (size_t j = 0; j < n; ++j) {
    const double cj = c[j];
    if (cj == 0.0) continue;
    const double* __restrict row = rows + j * n;
    for (size_t i = 0; i < n; ++i) values[i] += row[i] * cj;
  }
}

}  // namespace

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
    // vectorizes where a sum, a chain of dependent additions, did not.
    double* sums = out.data() + begin;
    std::fill(sums, sums + n, 0.0);
    AddScaledColumns(columns, x.data() + begin, n, sums);
  }
}

void ChunkedDct::Inverse(std::span<const double> coefficients, std::span<float> out) const {
  Tables tail;
  std::vector<double> values;
  for (size_t begin = 0; begin < coefficients.size(); begin += chunk_) {
    const size_t n = std::min(chunk_, coefficients.size() - begin);
    values.assign(n, 0.0);
    AddScaledRows(TablesFor(n, &tail).rows.data(), coefficients.data() + begin, n, values.data());
    for (size_t i = 0; i < n; ++i) out[begin + i] = static_cast<float>(values[i]);
  }
}

}  // namespace plexus
