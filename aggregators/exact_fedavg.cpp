// fedavg_exact: FedAvg whose sum is an ExactSum (aggregators/exact_sum.h), so that the published
// model is the same bits whatever order the updates arrive in, and the same a tree of edge
// aggregators computes from partial sums of the same updates (issue 41). The price: each weighted
// value is rounded to 2^-24 on the way in (docs/aggregators.md), and a sum that would leave int64
// refuses the update that would overflow it. Settings: weighted=true|false as fedavg.
#include <memory>
#include <vector>

#include "aggregators/aggregator.h"
#include "aggregators/exact_sum.h"
#include "aggregators/partial_sum_delta.h"
#include "aggregators/strategy_spec.h"
#include "core/thread_pool.h"

namespace plexus {
namespace {

class ExactFedAvg final : public Aggregator {
 public:
  explicit ExactFedAvg(bool weighted) : weighted_(weighted) {}

  Status Begin(const ModelState& base) override {
    base_ = base;
    sum_ = ExactSum(base.num_params());
    begun_ = true;
    return Status::Ok();
  }
  Status Fold(const Update& update) override { return FoldWeighted(update, 1.0); }
  // Linear in the values: the factor goes into the weight, the update is left as it is.
  Status FoldScaled(Update& update, double value_scale) override { return FoldWeighted(update, value_scale); }
  bool takes_the_mean() const override { return true; }
  // Coded updates are folded from their values; an edge's partial sum (PartialSumDelta) from its
  // integers, so that the tree's sum is the flat server's.
  bool folds_coded() const override { return true; }
  const ExactSum* partial_sum() const override { return &sum_; }
  size_t num_folded() const override { return static_cast<size_t>(sum_.count()); }

  Result<ModelState> Finalize() override {
    if (!begun_) return FailedPreconditionError("fedavg_exact: Finalize before Begin");
    if (sum_.empty()) return FailedPreconditionError("fedavg_exact: nothing folded");
    std::vector<float> mean(sum_.size());
    PLEXUS_RETURN_IF_ERROR(sum_.MeanInto(mean));
    ModelState next = base_;
    std::span<float> values = next.data();
    for (size_t i = 0; i < values.size(); ++i) values[i] += mean[i];
    next.set_version(base_.version() + 1);
    return next;
  }
  std::string Describe() const override {
    return std::string("fedavg_exact(weighted=") + (weighted_ ? "true" : "false") + ")";
  }

 private:
  Status FoldWeighted(const Update& update, double value_scale) {
    if (!begun_) return FailedPreconditionError("fedavg_exact: Fold before Begin");
    if (update.coded) {
      if (update.coded->num_values() != sum_.size()) {
        return InvalidArgumentError("a coded update of " + std::to_string(update.coded->num_values()) +
                                    " values from " + update.client_id + " for a model of " +
                                    std::to_string(sum_.size()));
      }
      if (const auto* partial = dynamic_cast<const PartialSumDelta*>(update.coded.get())) {
        // Its weights were applied where its updates were summed (the same settings there); a
        // staleness factor scales it whole, rounded once (exact for factor 1 only).
        return sum_.MergeScaled(partial->sum(), value_scale).WithContext("partial sum from " + update.client_id);
      }
    }
    if (!update.coded) PLEXUS_RETURN_IF_ERROR(update.delta.CheckSameLayout(base_));
    if (weighted_ && update.num_examples <= 0) {
      return InvalidArgumentError("an update from " + update.client_id + " with no examples");
    }
    const double weight = (weighted_ ? static_cast<double>(update.num_examples) : 1.0) * value_scale;
    if (update.coded) {
      const ModelState values = update.coded->Materialize(base_);
      return sum_.Add(values.data(), weight).WithContext("update from " + update.client_id);
    }
    return sum_.Add(update.delta.data(), weight).WithContext("update from " + update.client_id);
  }

  const bool weighted_;
  bool begun_ = false;
  ModelState base_;
  ExactSum sum_;
};

}  // namespace

Result<std::unique_ptr<Aggregator>> MakeExactFedAvg(StrategySpec& spec, ThreadPool*) {
  PLEXUS_ASSIGN_OR_RETURN(bool weighted, spec.GetBool("weighted", true));
  return std::unique_ptr<Aggregator>(std::make_unique<ExactFedAvg>(weighted));
}

}  // namespace plexus
