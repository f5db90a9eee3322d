// ClippedSum: the unweighted sum of client deltas each clipped to an L2 norm, in double
// precision: the part of a differentially private aggregate that bounds every client's influence
// (DP-FedAvg, DP-FTRL). Examples do not weigh, so a client claiming many cannot count for more
// than the clip. Folds one by one or a batch in one pass over the sum; counts the updates that
// were within the clip (adaptive clipping's quantile estimate). Thread-compatible.
#pragma once

#include <cstdint>
#include <span>

#include "aggregators/streaming_mean.h"
#include "core/model_state.h"
#include "core/thread_pool.h"
#include "core/update.h"

namespace plexus {

class PartialSumDelta;

class ClippedSum {
 public:
  explicit ClippedSum(ThreadPool* pool) : sum_(pool) {}

  // Starts over on top of `base` (the layout updates must have).
  void Reset(const ModelState& base);
  // sum += scale · min(1, clip / ‖delta‖) · delta. The errors of CheckUpdate (`strategy` names
  // the caller in them); nothing folded then. REQUIRES: Reset, clip > 0, 0 < scale ≤ 1.
  Status Fold(const Update& update, double clip, double scale, const char* strategy);
  // An edge's partial sum of k client deltas, each of which the edge clipped to `clip` and
  // summed unweighted (norm_bound:max=C,exact=true,weighted=false): sum += scale · their sum,
  // unclipped, once its own norm is checked against k · clip (what k deltas within the clip can
  // reach at most). InvalidArgument for a weighted partial (its weight is not its count) or one
  // beyond the bound; nothing folded then. REQUIRES: Reset, clip > 0, 0 < scale ≤ 1.
  Status FoldPartial(const Update& update, const PartialSumDelta& partial, double clip, double scale,
                     const char* strategy);
  // Fold over every update, reading the inputs once for the whole batch where it can; stops at
  // the first refused update (those before it stay folded) and returns its error.
  Status FoldAll(std::span<const Update* const> updates, double clip, const char* strategy);

  size_t count() const { return sum_.count(); }
  // Updates folded whose norm was within the clip.
  int64_t unclipped() const { return unclipped_; }
  // The sum, to be noised in place before it is released; it stays until the next Reset.
  std::span<double> mutable_sum() { return sum_.mutable_sum(); }

 private:
  void FoldBatch(std::span<const float* const> deltas, std::span<const double> scales, int64_t unclipped);

  StreamingMean sum_;
  ModelState base_;
  int64_t unclipped_ = 0;
};

}  // namespace plexus
