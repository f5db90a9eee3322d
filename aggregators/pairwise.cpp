#include "aggregators/pairwise.h"

#include <algorithm>

#include "aggregators/simd_kernels.h"
#include "aggregators/streaming_mean.h"

namespace plexus {
namespace {

// 1024 floats per row: the n rows of a block (400 KiB at n = 100) stay in L2 while every pair
// is formed; each pair's block product is summed in float, the blocks in double.
constexpr size_t kBlock = 1024;
constexpr size_t kMaxChunks = 64;

}  // namespace

std::vector<double> PairwiseSquaredDistances(std::span<const BufferedUpdate> u, ThreadPool* pool) {
  const size_t n = u.size();
  const size_t p = n ? u[0].delta.size() : 0;
  const size_t blocks = (p + kBlock - 1) / kBlock;
  const size_t chunks = std::max<size_t>(1, std::min(kMaxChunks, blocks));
  // Each chunk (a fixed range of blocks) accumulates its own Gram matrix; the chunks are then
  // summed in order, which keeps the result independent of how threads share the chunks.
  std::vector<double> partial(chunks * n * n, 0.0);
  ForRanges(
      pool, chunks,
      [&](size_t c_begin, size_t c_end) {
        for (size_t c = c_begin; c < c_end; ++c) {
          double* g = partial.data() + c * n * n;
          for (size_t b = blocks * c / chunks; b < blocks * (c + 1) / chunks; ++b) {
            const size_t begin = b * kBlock, len = std::min(kBlock, p - begin);
            for (size_t i = 0; i < n; ++i) {
              const float* ui = u[i].delta.data() + begin;
              size_t j = 0;
              for (; j + 4 <= i + 1; j += 4) {
                const float* rows[4];
                for (size_t r = 0; r < 4; ++r) rows[r] = u[j + r].delta.data() + begin;
                float dots[4];
                simd::Dot4(ui, rows, len, dots);
                for (size_t r = 0; r < 4; ++r) g[i * n + j + r] += dots[r];
              }
              for (; j <= i; ++j) g[i * n + j] += simd::Dot(ui, u[j].delta.data() + begin, len);
            }
          }
        }
      },
      /*min_chunk=*/1);
  std::vector<double> gram(n * n, 0.0);
  for (size_t c = 0; c < chunks; ++c) {
    for (size_t k = 0; k < n * n; ++k) gram[k] += partial[c * n * n + k];
  }
  std::vector<double> dist(n * n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < i; ++j) {
      const double d = std::max(0.0, gram[i * n + i] + gram[j * n + j] - 2.0 * gram[i * n + j]);
      dist[i * n + j] = dist[j * n + i] = d;
    }
  }
  return dist;
}

std::vector<double> KrumScores(const std::vector<double>& dist, size_t n, const std::vector<size_t>& members,
                               size_t neighbours) {
  std::vector<double> scores;
  std::vector<double> row;
  for (size_t i : members) {
    row.clear();
    for (size_t j : members) {
      if (j != i) row.push_back(dist[i * n + j]);
    }
    const size_t k = std::min(neighbours, row.size());
    std::partial_sort(row.begin(), row.begin() + static_cast<ptrdiff_t>(k), row.end());
    double s = 0.0;
    for (size_t q = 0; q < k; ++q) s += row[q];
    scores.push_back(s);
  }
  return scores;
}

size_t ArgMin(const std::vector<double>& scores) {
  return static_cast<size_t>(std::min_element(scores.begin(), scores.end()) - scores.begin());
}

}  // namespace plexus
