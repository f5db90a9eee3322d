#include "aggregators/streaming_mean.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>

#include "aggregators/simd_kernels.h"

namespace plexus {
namespace {

// 32 Ki doubles (256 KiB, in L2) per block: long enough runs through each input for the
// prefetchers, while four inputs per pass keep the traffic to the block low.
constexpr size_t kBlock = 32768;

// acc[0, len) (+)= sum_i w[i] deltas[i][b, b + len), up to four inputs per pass, in input order;
// `first` overwrites acc instead of adding to it. Returns whether the block's sum is finite:
// weights are finite and positive (and acc finite when added to), so it turns non-finite
// exactly when some input holds a NaN or infinity there. With check false (inputs known finite)
// it returns true without looking.
bool SumBlock(double* acc, bool first, std::span<const float* const> deltas, const double* w, size_t b, size_t len,
              bool check = true) {
  const size_t n = deltas.size();
  for (size_t i = 0; i < n; i += 4) {  // up to four inputs per pass over the block
    const size_t k = std::min<size_t>(4, n - i);
    const float* rows[4];
    for (size_t r = 0; r < k; ++r) rows[r] = deltas[i + r] + b;
    simd::WeightedSumUpTo4(acc, rows, &w[i], k, len, first && i == 0);
  }
  return !check || !simd::AnyNonFinite(acc, len);
}

}  // namespace

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

void StreamingMean::FoldCoded(const CodedDelta& delta, double weight, double scale) {
  const double w = weight * scale;
  double* s = sum_.data();
  const bool first = count_ == 0;
  ForRanges(pool_, sum_.size(), [=, &delta](size_t begin, size_t end) { delta.AddScaledTo(s, begin, end, w, first); });
  total_weight_ += weight;
  ++count_;
}

void StreamingMean::FoldBatchChecked(std::span<const float* const> deltas, std::span<const double> weights,
                                     std::span<const double> scales) {
  const size_t n = deltas.size();
  if (n == 0) return;
  std::vector<double> w(n);
  for (size_t i = 0; i < n; ++i) w[i] = weights[i] * scales[i];
  const bool first = count_ == 0;
  ForRanges(pool_, sum_.size(), [&](size_t begin, size_t end) {
    for (size_t b = begin; b < end; b += kBlock) {
      (void)SumBlock(sum_.data() + b, first, deltas, w.data(), b, std::min(kBlock, end - b), /*check=*/false);
    }
  });
  for (size_t i = 0; i < n; ++i) total_weight_ += weights[i];
  count_ += n;
}

size_t StreamingMean::FoldBatch(std::span<const float* const> deltas, std::span<const double> weights,
                                std::span<const double> scales) {
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
      if (count_ > 0) std::copy(sum_.data() + b, sum_.data() + b + len, acc);
      if (!SumBlock(acc, count_ == 0, deltas, w.data(), b, len)) {  // only then look closer
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

bool WriteWeightedSumStep(float* out, const float* base, std::span<const float* const> deltas,
                          std::span<const double> w, double k, size_t num_params, ThreadPool* pool) {
  std::atomic<bool> finite{true};
  ForRanges(pool, num_params, [&](size_t begin, size_t end) {
    thread_local std::vector<double> acc;  // pages stay mapped from one round to the next
    acc.resize(kBlock);
    for (size_t b = begin; b < end && finite.load(std::memory_order_relaxed); b += kBlock) {
      const size_t len = std::min(kBlock, end - b);
      if (!SumBlock(acc.data(), true, deltas, w.data(), b, len)) {
        finite = false;
        return;
      }
      simd::ApplyScaledSum(out + b, base + b, acc.data(), k, len);
    }
  });
  return finite;
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
