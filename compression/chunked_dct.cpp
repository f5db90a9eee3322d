#include "compression/chunked_dct.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace plexus {

ChunkedDct::ChunkedDct(size_t chunk) : chunk_(std::max<size_t>(chunk, 1)), table_(Table(chunk_)) {}

std::vector<double> ChunkedDct::Table(size_t n) {
  std::vector<double> t(n * n);
  const double scale = std::sqrt(2.0 / static_cast<double>(n));
  for (size_t j = 0; j < n; ++j) {
    const double c = j == 0 ? std::numbers::sqrt2 / 2 : 1.0;
    for (size_t i = 0; i < n; ++i) {
      t[j * n + i] =
          scale * c *
          std::cos(std::numbers::pi * (static_cast<double>(i) + 0.5) * static_cast<double>(j) / static_cast<double>(n));
    }
  }
  return t;
}

const std::vector<double>& ChunkedDct::TableFor(size_t n, std::vector<double>* tail) const {
  if (n == chunk_) return table_;
  if (tail->size() != n * n) *tail = Table(n);
  return *tail;
}

void ChunkedDct::Forward(std::span<const float> x, std::span<double> out) const {
  std::vector<double> tail;
  for (size_t begin = 0; begin < x.size(); begin += chunk_) {
    const size_t n = std::min(chunk_, x.size() - begin);
    const std::vector<double>& t = TableFor(n, &tail);
    for (size_t j = 0; j < n; ++j) {
      double sum = 0.0;
      for (size_t i = 0; i < n; ++i) sum += t[j * n + i] * static_cast<double>(x[begin + i]);
      out[begin + j] = sum;
    }
  }
}

void ChunkedDct::Inverse(std::span<const double> coefficients, std::span<float> out) const {
  std::vector<double> tail, values;
  for (size_t begin = 0; begin < coefficients.size(); begin += chunk_) {
    const size_t n = std::min(chunk_, coefficients.size() - begin);
    const std::vector<double>& t = TableFor(n, &tail);
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
