// StreamingMean: a weighted running sum of deltas in double precision, folded as updates arrive
// and split across a ThreadPool by parameter range. O(model) memory however many updates.
// The sum is exact up to double rounding, so the result is independent of arrival order except
// where a coordinate lands within ~2^-29 (relative) of a float rounding boundary.
// Thread-compatible.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "core/coded_delta.h"
#include "core/model_state.h"
#include "core/thread_pool.h"

namespace plexus {

class StreamingMean {
 public:
  explicit StreamingMean(ThreadPool* pool) : pool_(pool) {}

  void Reset(size_t num_params);
  // sum += weight * scale * delta. REQUIRES: delta.size() == num_params, weight > 0.
  void Fold(std::span<const float> delta, double weight, double scale = 1.0);
  // The same from a delta's codes: sum += weight * scale * value. REQUIRES as Fold.
  void FoldCoded(const CodedDelta& delta, double weight, double scale = 1.0);
  // Folds a batch in one pass over the inputs: L2-sized blocks of the running sum take every
  // input's contribution (four inputs per pass over the block) before moving on, into a second
  // buffer that replaces the sum only when all inputs were finite. Returns the index of the first input holding a
  // non-finite value (nothing folded then), or deltas.size() on success. REQUIRES: weights/scales parallel to deltas,
  // each delta num_params long.
  // FoldBatch for inputs already checked finite: the sum takes them in place, with nothing to
  // undo and so no second buffer (same bits). A sum that overflows stays non-finite for the
  // caller's check of the result.
  void FoldBatchChecked(std::span<const float* const> deltas, std::span<const double> weights,
                        std::span<const double> scales);
  size_t FoldBatch(std::span<const float* const> deltas, std::span<const double> weights,
                   std::span<const double> scales);
  size_t count() const { return count_; }
  double total_weight() const { return total_weight_; }
  // sum / total_weight. REQUIRES: count() > 0.
  std::vector<double> Mean() const;
  // The weighted sum itself (divide by total_weight() for the mean).
  std::span<const double> sum() const { return sum_; }
  // The same, to change in place before it is released (DP noise): no model-sized copy. What is
  // written stays until the next Reset.
  std::span<double> mutable_sum() { return sum_; }

 private:
  ThreadPool* const pool_;
  // Model-sized, so from the large-block cache, and never zero-filled: every value is written
  // before it is read (on a virtual machine the two fresh 8 MB sums of a 1M-parameter merge
  // used to cost some 4,000 page faults and a zeroing pass each).
  using Buffer = std::vector<double, ModelBufferAllocator<double>>;
  Buffer sum_;   // meaningful only once count_ > 0 (Reset does not zero it)
  Buffer next_;  // FoldBatch's output buffer
  double total_weight_ = 0.0;
  size_t count_ = 0;
};

// out = base + k x (w[0] deltas[0] + w[1] deltas[1] + ...), computed block by block with each
// block's sum in a cache-sized buffer: one pass over the inputs and no model-sized intermediate.
// The same bits as FoldBatch into an empty StreamingMean followed by ApplyDelta(base, sum, k).
// Returns false when some input holds a non-finite value (out is then partly written).
// REQUIRES: w parallel to deltas; out, base and each delta num_params long.
bool WriteWeightedSumStep(float* out, const float* base, std::span<const float* const> deltas,
                          std::span<const double> w, double k, size_t num_params, ThreadPool* pool);

// Runs fn(begin, end) over [0, n), on the pool when there is one; ranges shorter than
// min_chunk items are not split (use 1 when each item is a large block of work).
void ForRanges(ThreadPool* pool, size_t n, const std::function<void(size_t, size_t)>& fn, size_t min_chunk = 1 << 14);

}  // namespace plexus
