// fedavg_exact: FedAvg whose sum is an ExactSum (aggregators/exact_sum.h), so that the published
// model is the same bits whatever order the updates arrive in, and the same a tree of edge
// aggregators computes from partial sums of the same updates (issue 41). The price: each weighted
// value is rounded to 2^-24 on the way in (docs/aggregators.md), and a sum that would leave int64
// refuses the update that would overflow it. Settings: weighted=true|false as fedavg.
//
// The same aggregator serves the averaging family's `exact=true` (fedavg, fedavgm, fedadam,
// fedyogi, fedadagrad, norm_bound:max=<number>; averaging.h): the exact mean handed to their
// server optimizer, each update first clipped to the norm bound when there is one. An edge's
// partial sum is merged as it came (its clipping, if any, was the edge's).
#include <cmath>
#include <memory>
#include <vector>

#include "aggregators/aggregator.h"
#include "aggregators/averaging.h"
#include "aggregators/exact_sum.h"
#include "aggregators/partial_sum_delta.h"
#include "aggregators/simd_kernels.h"
#include "aggregators/strategy_spec.h"
#include "core/thread_pool.h"

namespace plexus {
namespace {

class ExactAveraging final : public Aggregator {
 public:
  ExactAveraging(AveragingOptions o, std::unique_ptr<ServerOptimizer> step, ThreadPool* pool)
      : o_(std::move(o)), step_(std::move(step)), pool_(pool) {}

  Status Begin(const ModelState& base) override {
    base_ = base;
    sum_ = ExactSum(base.num_params());
    begun_ = true;
    return Status::Ok();
  }
  Status Fold(const Update& update) override { return FoldWeighted(update, 1.0); }
  // Linear in the values: the factor scales the update's values in the sum (its weight stays, as
  // in the float averaging's FoldScaled), the update is left as it is.
  Status FoldScaled(Update& update, double value_scale) override { return FoldWeighted(update, value_scale); }
  bool takes_the_mean() const override { return o_.clip_norm <= 0; }
  // Coded updates are folded from their values; an edge's partial sum (PartialSumDelta) from its
  // integers, so that the tree's sum is the flat server's.
  bool folds_coded() const override { return true; }
  const ExactSum* partial_sum() const override { return &sum_; }
  bool finalizes_to_the_mean() const override { return step_->StatelessRate() == 1.0; }
  size_t num_folded() const override { return static_cast<size_t>(sum_.count()); }

  Result<ModelState> Finalize() override {
    if (!begun_) return FailedPreconditionError(o_.name + ": Finalize before Begin");
    if (sum_.empty()) return FailedPreconditionError(o_.name + ": nothing folded");
    std::vector<float> mean(sum_.size());
    PLEXUS_RETURN_IF_ERROR(sum_.MeanInto(mean));
    if (step_->StatelessRate() == 1.0) {  // plain FedAvg: the float sum, the bits fedavg_exact always gave
      ModelState next = base_;
      std::span<float> values = next.data();
      for (size_t i = 0; i < values.size(); ++i) values[i] += mean[i];
      next.set_version(base_.version() + 1);
      return next;
    }
    // The optimizer's step from the exact mean: the same bits wherever the mean is the same.
    const std::vector<double> wide(mean.begin(), mean.end());
    return step_->Step(base_, wide, 1.0, pool_);
  }
  std::string SaveState() const override { return step_->SaveState(); }
  Status RestoreState(std::string_view state) override { return step_->RestoreState(state).WithContext(o_.name); }
  std::string Describe() const override { return o_.name + "(" + o_.params + ")"; }

 private:
  Status FoldWeighted(const Update& update, double value_scale) {
    if (!begun_) return FailedPreconditionError(o_.name + ": Fold before Begin");
    if (update.coded) {
      if (update.coded->num_values() != sum_.size()) {
        return InvalidArgumentError("a coded update of " + std::to_string(update.coded->num_values()) +
                                    " values from " + update.client_id + " for a model of " +
                                    std::to_string(sum_.size()));
      }
      if (const PartialSumDelta* partial = PartialSumOf(update)) {
        // Its weights (and clipping) were applied where its updates were summed (the same
        // settings there); a staleness factor scales its sums, rounded once (exact for factor 1).
        return sum_.MergeScaled(partial->sum(), value_scale).WithContext("partial sum from " + update.client_id);
      }
    }
    if (!update.coded) PLEXUS_RETURN_IF_ERROR(update.delta.CheckSameLayout(base_));
    if (o_.weighted && update.num_examples <= 0) {
      return InvalidArgumentError("an update from " + update.client_id + " with no examples");
    }
    const double weight = o_.weighted ? static_cast<double>(update.num_examples) : 1.0;
    ModelState decoded;
    if (update.coded) decoded = update.coded->Materialize(base_);
    const std::span<const float> values = update.coded ? decoded.data() : update.delta.data();
    if (o_.clip_norm > 0) {  // the clip scales the values, not the update's weight among the others
      const double norm = value_scale * std::sqrt(simd::SquaredNorm(values.data(), values.size()));
      if (norm > o_.clip_norm) value_scale *= o_.clip_norm / norm;
    }
    return sum_.Add(values, weight, value_scale).WithContext("update from " + update.client_id);
  }

  const AveragingOptions o_;
  const std::unique_ptr<ServerOptimizer> step_;
  ThreadPool* const pool_;
  bool begun_ = false;
  ModelState base_;
  ExactSum sum_;
};

}  // namespace

std::unique_ptr<Aggregator> MakeExactAveraging(AveragingOptions options, std::unique_ptr<ServerOptimizer> step,
                                               ThreadPool* pool) {
  return std::make_unique<ExactAveraging>(std::move(options), std::move(step), pool);
}

Result<std::unique_ptr<Aggregator>> MakeExactFedAvg(StrategySpec& spec, ThreadPool* pool) {
  PLEXUS_ASSIGN_OR_RETURN(bool weighted, spec.GetBool("weighted", true));
  AveragingOptions o{"fedavg_exact", weighted ? "weighted=true" : "weighted=false", weighted};
  return MakeExactAveraging(std::move(o), MakePlainStep(1.0), pool);
}

}  // namespace plexus
