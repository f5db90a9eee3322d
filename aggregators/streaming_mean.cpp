#include "aggregators/streaming_mean.h"

#include <algorithm>
#include <cstdint>
#include <mutex>

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
      for (size_t j = begin; j < end; ++j) s[j] = w * static_cast<double>(d[j]);
    } else {
      for (size_t j = begin; j < end; ++j) s[j] += w * static_cast<double>(d[j]);
    }
  });
  total_weight_ += weight;
  ++count_;
}

size_t StreamingMean::FoldBatch(std::span<const float* const> deltas, std::span<const double> weights,
                                std::span<const double> scales) {
  constexpr size_t kBlock = 2048;  // 16 KiB of doubles: stays in L1 while every input passes
  const size_t n = deltas.size();
  next_.resize(sum_.size());
  std::mutex mu;
  std::vector<uint8_t> bad(n, 0);
  ForRanges(pool_, sum_.size(), [&](size_t begin, size_t end) {
    std::vector<uint8_t> local(n, 0);
    for (size_t b = begin; b < end; b += kBlock) {
      const size_t len = std::min(kBlock, end - b);
      double* acc = next_.data() + b;
      const double* prev = sum_.data() + b;
      if (count_ == 0) {
        std::fill(acc, acc + len, 0.0);
      } else {
        for (size_t j = 0; j < len; ++j) acc[j] = prev[j];
      }
      for (size_t i = 0; i < n; ++i) {
        const float* d = deltas[i] + b;
        const double w = weights[i] * scales[i];
        int nonfinite = 0;
#pragma omp simd reduction(| : nonfinite)
        for (size_t j = 0; j < len; ++j) {
          const float x = d[j];
          nonfinite |= !(x * 0.0f == 0.0f);  // false only for NaN and infinities
          acc[j] += w * static_cast<double>(x);
        }
        local[i] |= static_cast<uint8_t>(nonfinite != 0);
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
