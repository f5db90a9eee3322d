#include "aggregators/robust_aggregator.h"

namespace plexus {
namespace {

class Robust final : public Aggregator {
 public:
  Robust(std::string description, RobustRule rule, ThreadPool* pool, size_t min_updates)
      : description_(std::move(description)),
        rule_(std::move(rule)),
        pool_(pool),
        min_updates_(min_updates),
        buffer_(pool) {}

  Status Begin(const ModelState& base) override {
    buffer_.Reset(base);
    begun_ = true;
    return Status::Ok();
  }
  Status Fold(const Update& u) override {
    if (!begun_) return FailedPreconditionError(description_ + ": Fold before Begin");
    return buffer_.Add(u, description_.c_str());
  }
  // One aggregation over updates the caller holds throughout: the rule reads them where they are.
  Result<ModelState> Aggregate(const ModelState& base, std::span<const Update* const> updates) override {
    PLEXUS_RETURN_IF_ERROR(Begin(base));
    for (const Update* u : updates) {
      if (Status added = buffer_.AddView(*u, description_.c_str()); !added.ok()) {
        buffer_.Clear();  // no view may outlive this call
        begun_ = false;
        return added;
      }
    }
    Result<ModelState> out = Finalize();
    buffer_.Clear();
    return out;
  }
  // An update given up whole and unscaled is kept as it is, not copied.
  Status FoldShared(std::shared_ptr<Update> update, double value_scale) override {
    if (value_scale != 1.0) return FoldScaled(*update, value_scale);
    if (!begun_) return FailedPreconditionError(description_ + ": Fold before Begin");
    return buffer_.AddShared(std::move(update), description_.c_str());
  }
  size_t num_folded() const override { return buffer_.size(); }
  Result<ModelState> Finalize() override {
    if (!begun_ || buffer_.size() == 0) return FailedPreconditionError(description_ + ": no updates to aggregate");
    PLEXUS_ASSIGN_OR_RETURN(std::vector<double> delta, rule_(buffer_.Sorted(), pool_));
    begun_ = false;
    ModelState out = ApplyDelta(buffer_.base(), delta, 1.0, pool_);
    buffer_.Clear();
    return out;
  }
  std::string Describe() const override { return description_; }
  size_t min_updates() const override { return min_updates_; }

 private:
  const std::string description_;
  const RobustRule rule_;
  ThreadPool* const pool_;
  const size_t min_updates_;
  UpdateBuffer buffer_;
  bool begun_ = false;
};

}  // namespace

std::unique_ptr<Aggregator> MakeRobust(std::string description, RobustRule rule, ThreadPool* pool, size_t min_updates) {
  return std::make_unique<Robust>(std::move(description), std::move(rule), pool, min_updates);
}

Status PreconditionFailed(const std::string& strategy, const std::string& condition, size_t n, int64_t f) {
  return FailedPreconditionError(strategy + " needs " + condition + " updates (got n=" + std::to_string(n) +
                                 " with f=" + std::to_string(f) + ")");
}

}  // namespace plexus
