#include "aggregators/streaming_mean.h"

namespace plexus {

void ForRanges(ThreadPool* pool, size_t n, const std::function<void(size_t, size_t)>& fn) {
  if (pool) {
    pool->ParallelFor(n, fn);
  } else {
    fn(0, n);
  }
}

void StreamingMean::Reset(size_t num_params) {
  sum_.assign(num_params, 0.0);
  total_weight_ = 0.0;
  count_ = 0;
}

void StreamingMean::Fold(std::span<const float> delta, double weight, double scale) {
  const double w = weight * scale;
  const float* d = delta.data();
  double* s = sum_.data();
  ForRanges(pool_, sum_.size(), [=](size_t begin, size_t end) {
    for (size_t j = begin; j < end; ++j) s[j] += w * static_cast<double>(d[j]);
  });
  total_weight_ += weight;
  ++count_;
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
