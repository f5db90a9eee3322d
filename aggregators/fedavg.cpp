// FedAvg (McMahan et al., AISTATS 2017) in delta form: x_{t+1} = x_t + sum_i p_i * delta_i with
// p_i = m_i / sum_j m_j (examples) or 1/n (weighted=false). Streaming: each update is folded into
// a double-precision running sum as it arrives, so memory is O(model) however many clients
// report; the fold runs in parallel over parameter ranges.
#include <memory>
#include <vector>

#include "aggregators/aggregator.h"
#include "aggregators/strategy_spec.h"
#include "core/thread_pool.h"

namespace plexus {
namespace {

class FedAvg final : public Aggregator {
 public:
  FedAvg(bool weighted, ThreadPool* pool) : weighted_(weighted), pool_(pool) {}

  Status Begin(const ModelState& base) override {
    base_ = base;
    sum_.assign(base.num_params(), 0.0);
    total_weight_ = 0.0;
    folded_ = 0;
    begun_ = true;
    return Status::Ok();
  }

  Status Fold(const Update& update) override {
    if (!begun_) return FailedPreconditionError("fedavg: Fold before Begin");
    PLEXUS_RETURN_IF_ERROR(update.delta.CheckSameLayout(base_).WithContext("update from client " + update.client_id));
    PLEXUS_RETURN_IF_ERROR(update.delta.CheckFinite().WithContext("update from client " + update.client_id));
    if (weighted_ && update.num_examples <= 0) {
      return InvalidArgumentError("update from client " + update.client_id + " reports " +
                                  std::to_string(update.num_examples) + " examples; fedavg needs a positive count");
    }
    const double w = weighted_ ? static_cast<double>(update.num_examples) : 1.0;
    const float* d = update.delta.data().data();
    double* s = sum_.data();
    auto fold = [=](size_t begin, size_t end) {
      for (size_t j = begin; j < end; ++j) s[j] += w * static_cast<double>(d[j]);
    };
    if (pool_) {
      pool_->ParallelFor(sum_.size(), fold);
    } else {
      fold(0, sum_.size());
    }
    total_weight_ += w;
    ++folded_;
    return Status::Ok();
  }

  size_t num_folded() const override { return folded_; }

  Result<ModelState> Finalize() override {
    if (!begun_ || folded_ == 0) return FailedPreconditionError("fedavg: no updates to aggregate");
    ModelState out = base_;
    out.set_version(base_.version() + 1);
    const double inv = 1.0 / total_weight_;
    float* x = out.data().data();
    const double* s = sum_.data();
    auto apply = [=](size_t begin, size_t end) {
      for (size_t j = begin; j < end; ++j) x[j] = static_cast<float>(static_cast<double>(x[j]) + s[j] * inv);
    };
    if (pool_) {
      pool_->ParallelFor(sum_.size(), apply);
    } else {
      apply(0, sum_.size());
    }
    begun_ = false;
    return out;
  }

  std::string Describe() const override { return weighted_ ? "fedavg(weighted=true)" : "fedavg(weighted=false)"; }

 private:
  const bool weighted_;
  ThreadPool* const pool_;
  ModelState base_;
  std::vector<double> sum_;
  double total_weight_ = 0.0;
  size_t folded_ = 0;
  bool begun_ = false;
};

}  // namespace

Result<std::unique_ptr<Aggregator>> MakeFedAvg(StrategySpec& spec, ThreadPool* pool) {
  PLEXUS_ASSIGN_OR_RETURN(bool weighted, spec.GetBool("weighted", true));
  return std::unique_ptr<Aggregator>(std::make_unique<FedAvg>(weighted, pool));
}

}  // namespace plexus
