#include "aggregators/streaming_mean.h"

#include <algorithm>
#include <cstdint>
#include <mutex>

#include "aggregators/simd_kernels.h"

namespace plexus {

void ForRanges(ThreadPool* pool, size_t n, const std::function<void(size_t, size_t)>& fn, size_t min_chunk) {
  if (pool) {
    pool->ParallelFor(n, fn, min_chunk);
  } else {
    fn(0, n);
  }
}

void StreamingMean::Reset(size_t num_params) {
  sum_.resize(num_params);  // the first fold overwrites instead of adding: no zeroing pass
  total_weight_ = 0.0;
  count_ = 0;
}

void StreamingMean::Fold(std::span<const float> delta, double weight, double scale) {
  const double w = weight * scale;
  const float* d = delta.data();
  double* s = sum_.data();
  const bool first = count_ == 0;
  ForRanges(pool_, sum_.size(), [=](size_t begin, size_t end) {
    if (first) {
      simd::StoreScaled(s + begin, d + begin, end - begin, w);
    } else {
      simd::AccumulateScaled(s + begin, d + begin, end - begin, w);
    }
  });
  total_weight_ += weight;
  ++count_;
}

size_t StreamingMean::FoldBatch(std::span<const float* const> deltas, std::span<const double> weights,
                                std::span<const double> scales) {
  // 32 Ki doubles (256 KiB, in L2) per block: long enough runs through each input for the
  // prefetchers, while four inputs per pass keep the traffic to the block low.
  constexpr size_t kBlock = 32768;
  const size_t n = deltas.size();
  if (n == 0) return 0;
  std::vector<double> w(n);
  for (size_t i = 0; i < n; ++i) w[i] = weights[i] * scales[i];
  next_.resize(sum_.size());
  std::mutex mu;
  std::vector<uint8_t> bad(n, 0);
  ForRanges(pool_, sum_.size(), [&](size_t begin, size_t end) {
    std::vector<uint8_t> local(n, 0);
    for (size_t b = begin; b < end; b += kBlock) {
      const size_t len = std::min(kBlock, end - b);
      double* acc = next_.data() + b;
      size_t i = 0;
      if (count_ == 0) {
        simd::StoreScaled(acc, deltas[0] + b, len, w[0]);
        i = 1;
      } else {
        std::copy(sum_.data() + b, sum_.data() + b + len, acc);
      }
      for (; i + 4 <= n; i += 4) {
        const float* rows[4] = {deltas[i] + b, deltas[i + 1] + b, deltas[i + 2] + b, deltas[i + 3] + b};
        simd::AccumulateScaled4(acc, rows, &w[i], len);
      }
      for (; i < n; ++i) simd::AccumulateScaled(acc, deltas[i] + b, len, w[i]);
      // Weights are finite and positive and the running sum is finite, so the block's sum turns
      // non-finite exactly when some input holds a NaN or infinity there; only then look closer.
      if (simd::AnyNonFinite(acc, len)) {
        for (size_t k = 0; k < n; ++k) local[k] |= static_cast<uint8_t>(simd::AnyNonFinite(deltas[k] + b, len));
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    for (size_t i = 0; i < n; ++i) bad[i] |= local[i];
  });
  for (size_t i = 0; i < n; ++i) {
    if (bad[i]) return i;
  }
  sum_.swap(next_);
  for (size_t i = 0; i < n; ++i) total_weight_ += weights[i];
  count_ += n;
  return n;
}

std::vector<double> StreamingMean::Mean() const {
  std::vector<double> mean(sum_.size());
  const double inv = 1.0 / total_weight_;
  const double* s = sum_.data();
  double* m = mean.data();
  ForRanges(pool_, sum_.size(), [=](size_t begin, size_t end) {
    for (size_t j = begin; j < end; ++j) m[j] = s[j] * inv;
  });
  return mean;
}

}  // namespace plexus
