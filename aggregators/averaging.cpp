#include "aggregators/averaging.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "aggregators/simd_kernels.h"
#include "aggregators/strategy_spec.h"
#include "aggregators/streaming_mean.h"
#include "aggregators/update_buffer.h"

namespace plexus {
namespace {

class Averaging final : public Aggregator {
 public:
  Averaging(AveragingOptions o, std::unique_ptr<ServerOptimizer> step, ThreadPool* pool)
      : o_(std::move(o)), step_(std::move(step)), pool_(pool), mean_(pool) {}

  Status Begin(const ModelState& base) override {
    if (base_.CheckSameLayout(base).ok()) {  // the usual case: reuse the storage, copy in parallel
      float* dst = base_.data().data();
      const float* src = base.data().data();
      ForRanges(pool_, base.num_params(),
                [=](size_t begin, size_t end) { std::copy(src + begin, src + end, dst + begin); });
      base_.set_version(base.version());
    } else {
      base_ = base;
    }
    held_.clear();
    mean_.Reset(base.num_params());
    steps_weighted_ = 0.0;
    begun_ = true;
    return Status::Ok();
  }

  Status Fold(const Update& u) override { return FoldTimes(u, 1.0); }

  // The factor joins the update's weight in the running sum: no pass over the update to scale it.
  Status FoldScaled(Update& u, double value_scale) override { return FoldTimes(u, value_scale); }

  bool folds_coded() const override { return true; }
  bool takes_the_mean() const override { return o_.clip_norm <= 0; }

  Status FoldShared(std::shared_ptr<Update> u, double value_scale) override {
    if (o_.clip_norm > 0 || u->coded) return FoldTimes(*u, value_scale);  // their own paths, one by one
    PLEXUS_RETURN_IF_ERROR(CheckFoldable(*u));
    held_.push_back({std::move(u), value_scale});
    return held_.size() == kHeldPerPass ? FoldHeld() : Status::Ok();
  }

  Status FoldAll(std::span<const Update* const> updates) override {
    // Clipping needs each update's norm before its contribution, and coded updates fold from
    // their codes: fold one by one then.
    if (o_.clip_norm > 0 || AnyCoded(updates)) return Aggregator::FoldAll(updates);
    if (!begun_) return FailedPreconditionError(o_.name + ": Fold before Begin");
    PLEXUS_RETURN_IF_ERROR(FoldHeld());
    std::vector<const float*> deltas;
    std::vector<double> weights, scales;
    double steps_weighted = 0.0;
    bool all_checked_finite = true;
    for (size_t i = 0; i < updates.size(); ++i) {
      const Update& u = *updates[i];
      const std::optional<Share> share = BatchShare(u, base_);
      if (!share) {  // fold the valid prefix, then report this update exactly as Fold would
        PLEXUS_RETURN_IF_ERROR(FoldAll(updates.first(i)));
        return Fold(u);
      }
      deltas.push_back(u.delta.data().data());
      weights.push_back(share->weight);
      scales.push_back(share->scale);
      steps_weighted += share->weight * static_cast<double>(u.local_steps);
      all_checked_finite = all_checked_finite && u.delta.checked_finite();
    }
    // Inputs checked finite as they were read (files, decoded uploads) cannot fail the fold: the
    // sum takes them in place, with no second model-sized buffer to fill and swap.
    if (all_checked_finite) {
      mean_.FoldBatchChecked(deltas, weights, scales);
      steps_weighted_ += steps_weighted;
      return Status::Ok();
    }
    const size_t bad = mean_.FoldBatch(deltas, weights, scales);
    if (bad < updates.size()) {
      PLEXUS_RETURN_IF_ERROR(FoldAll(updates.first(bad)));
      return Fold(*updates[bad]);
    }
    steps_weighted_ += steps_weighted;
    return Status::Ok();
  }

  size_t num_folded() const override { return mean_.count() + held_.size(); }

  // With a stateless step and no clipping the new model is written block by block during the one
  // pass over the inputs: no copy of the base and no model-sized sum. Anything unusual (a
  // refused update, a non-finite value) takes the three-call path, which reports it.
  Result<ModelState> Aggregate(const ModelState& base, std::span<const Update* const> updates) override {
    held_.clear();  // a new aggregation, as Begin starts one
    const std::optional<double> lr = step_->StatelessRate();
    if (!lr || o_.clip_norm > 0 || updates.empty() || AnyCoded(updates)) return Aggregator::Aggregate(base, updates);
    std::vector<const float*> deltas;
    std::vector<double> w;
    double total_weight = 0.0, steps_weighted = 0.0;
    for (const Update* u : updates) {
      const std::optional<Share> share = BatchShare(*u, base);
      if (!share) return Aggregator::Aggregate(base, updates);
      deltas.push_back(u->delta.data().data());
      w.push_back(share->weight * share->scale);
      total_weight += share->weight;
      steps_weighted += share->weight * static_cast<double>(u->local_steps);
    }
    ModelState out = ModelState::UninitializedLike(base);
    out.set_version(base.version() + 1);
    if (!WriteWeightedSumStep(out.data().data(), base.data().data(), deltas, w,
                              *lr * SumScale(total_weight, steps_weighted), base.num_params(), pool_)) {
      return Aggregator::Aggregate(base, updates);
    }
    begun_ = false;
    return out;
  }

  Result<ModelState> Finalize() override {
    PLEXUS_RETURN_IF_ERROR(FoldHeld());
    if (!begun_ || mean_.count() == 0) return FailedPreconditionError(o_.name + ": no updates to aggregate");
    begun_ = false;
    return step_->Step(base_, mean_.sum(), SumScale(mean_.total_weight(), steps_weighted_), pool_);
  }

  std::string SaveState() const override { return step_->SaveState(); }
  Status RestoreState(std::string_view state) override { return step_->RestoreState(state).WithContext(o_.name); }

  std::string Describe() const override {
    std::string opt = step_->Describe();
    std::string params = o_.params;
    if (opt != "lr=1") params += (params.empty() ? "" : ",") + opt;
    return o_.name + "(" + params + ")";
  }

 private:
  // Fold's checks: begun, the base's layout, finite values, a weight, FedNova's step count.
  Status CheckFoldable(const Update& u) const {
    if (!begun_) return FailedPreconditionError(o_.name + ": Fold before Begin");
    PLEXUS_RETURN_IF_ERROR(CheckUpdate(u, base_, o_.weighted, o_.name.c_str(), /*takes_coded=*/true));
    if (o_.normalize_by_steps && u.local_steps <= 0) {
      return InvalidArgumentError(o_.name + ": update from client " + u.client_id +
                                  " reports no local steps; FedNova needs the step count");
    }
    return Status::Ok();
  }

  // Folds the held updates (checked when they came) in one pass over the sum, in order.
  Status FoldHeld() {
    if (held_.empty()) return Status::Ok();
    const std::vector<Held> held = std::move(held_);  // alive until folded; held_ empty again
    held_.clear();
    std::vector<const float*> deltas;
    std::vector<double> weights, scales;
    double steps_weighted = 0.0;
    for (const Held& h : held) {
      const Update& u = *h.update;
      const Share share = ShareOf(u, h.value_scale);
      deltas.push_back(u.delta.data().data());
      weights.push_back(share.weight);
      scales.push_back(share.scale);
      steps_weighted += share.weight * static_cast<double>(u.local_steps);
    }
    mean_.FoldBatchChecked(deltas, weights, scales);
    steps_weighted_ += steps_weighted;
    return Status::Ok();
  }

  // Folds value_scale x u.delta.
  Status FoldTimes(const Update& u, double value_scale) {
    PLEXUS_RETURN_IF_ERROR(FoldHeld());
    PLEXUS_RETURN_IF_ERROR(CheckFoldable(u));
    const Share share = ShareOf(u, value_scale);
    const double w = share.weight;
    double scale = share.scale;
    if (o_.clip_norm > 0) {
      const double norm =
          value_scale *
          std::sqrt(u.coded ? u.coded->SquaredNorm() : simd::SquaredNorm(u.delta.data().data(), u.delta.num_params()));
      if (norm > o_.clip_norm) scale *= o_.clip_norm / norm;
    }
    if (u.coded) {
      mean_.FoldCoded(*u.coded, w, scale);
    } else {
      mean_.Fold(u.delta.data(), w, scale);
    }
    steps_weighted_ += w * static_cast<double>(u.local_steps);
    return Status::Ok();
  }

  static bool AnyCoded(std::span<const Update* const> updates) {
    return std::any_of(updates.begin(), updates.end(), [](const Update* u) { return u->coded != nullptr; });
  }

  // An update's weight (examples, or 1) and scale (1 / local steps for FedNova, else 1) when the
  // batch paths can take it as it is; nullopt for a wrong layout or a missing example or step
  // count, which Fold reports with its message (finiteness is checked on the sums).
  struct Share {
    double weight, scale;
  };
  std::optional<Share> BatchShare(const Update& u, const ModelState& base) const {
    if (!u.delta.CheckSameLayout(base).ok()) return std::nullopt;
    if (o_.weighted && u.num_examples <= 0) return std::nullopt;
    if (o_.normalize_by_steps && u.local_steps <= 0) return std::nullopt;
    return ShareOf(u, 1.0);
  }
  // An update's weight (examples, or 1) and the scale of value_scale x its values (divided by its
  // local steps for FedNova): the one formula of every fold path.
  Share ShareOf(const Update& u, double value_scale) const {
    return Share{o_.weighted ? static_cast<double>(u.num_examples) : 1.0,
                 o_.normalize_by_steps ? value_scale / static_cast<double>(u.local_steps) : value_scale};
  }

  // What turns the weighted sum into the averaged delta.
  double SumScale(double total_weight, double steps_weighted) const {
    double scale = 1.0 / total_weight;
    if (o_.normalize_by_steps) scale *= steps_weighted / total_weight;  // tau_eff
    return scale;
  }

  const AveragingOptions o_;
  std::unique_ptr<ServerOptimizer> step_;
  ThreadPool* const pool_;
  StreamingMean mean_;
  ModelState base_;
  double steps_weighted_ = 0.0;
  bool begun_ = false;
  // FoldShared's updates waiting for a pass over the sum with others, with their value scales.
  struct Held {
    std::shared_ptr<const Update> update;  // given up by the caller, never changed here
    double value_scale;
  };
  static constexpr size_t kHeldPerPass = 4;
  std::vector<Held> held_;
};

Status InRange(const std::string& strategy, const char* key, double v, double lo, double hi, bool hi_open) {
  if (v >= lo && (hi_open ? v < hi : v <= hi)) return Status::Ok();
  return InvalidArgumentError("strategy '" + strategy + "': " + key + "=" + std::to_string(v) + " must lie in [" +
                              std::to_string(lo) + ", " + std::to_string(hi) + (hi_open ? ")" : "]"));
}

Status Positive(const std::string& strategy, const char* key, double v) {
  if (v > 0) return Status::Ok();
  return InvalidArgumentError("strategy '" + strategy + "': " + key + " must be positive");
}

Result<std::unique_ptr<Aggregator>> MakeAdaptive(StrategySpec& spec, ThreadPool* pool, AdaptiveKind kind) {
  PLEXUS_ASSIGN_OR_RETURN(double lr, spec.GetDouble("lr", 0.01));
  PLEXUS_ASSIGN_OR_RETURN(double b1, spec.GetDouble("beta1", 0.9));
  double b2 = 0.99;
  if (kind != AdaptiveKind::kAdagrad) {
    PLEXUS_ASSIGN_OR_RETURN(b2, spec.GetDouble("beta2", 0.99));
  }
  PLEXUS_ASSIGN_OR_RETURN(double tau, spec.GetDouble("tau", 1e-3));
  PLEXUS_ASSIGN_OR_RETURN(bool weighted, spec.GetBool("weighted", true));
  PLEXUS_RETURN_IF_ERROR(Positive(spec.name(), "lr", lr));
  PLEXUS_RETURN_IF_ERROR(InRange(spec.name(), "beta1", b1, 0, 1, true));
  PLEXUS_RETURN_IF_ERROR(InRange(spec.name(), "beta2", b2, 0, 1, true));
  PLEXUS_RETURN_IF_ERROR(Positive(spec.name(), "tau", tau));
  AveragingOptions o{spec.name(), weighted ? "" : "weighted=false", weighted};
  return AveragingFrom(spec, std::move(o), MakeAdaptiveStep(kind, lr, b1, b2, tau), pool);
}

}  // namespace

std::unique_ptr<Aggregator> MakeAveraging(AveragingOptions options, std::unique_ptr<ServerOptimizer> step,
                                          ThreadPool* pool) {
  return std::make_unique<Averaging>(std::move(options), std::move(step), pool);
}

Result<std::unique_ptr<Aggregator>> AveragingFrom(StrategySpec& spec, AveragingOptions o,
                                                  std::unique_ptr<ServerOptimizer> step, ThreadPool* pool) {
  PLEXUS_ASSIGN_OR_RETURN(bool exact, spec.GetBool("exact", false));
  if (!exact) return MakeAveraging(std::move(o), std::move(step), pool);
  o.params = "exact=true" + std::string(o.params.empty() ? "" : ",") + o.params;
  if (std::string opt = step->Describe(); opt != "lr=1") o.params += "," + opt;
  return MakeExactAveraging(std::move(o), std::move(step), pool);
}

Result<std::unique_ptr<Aggregator>> MakeFedAvg(StrategySpec& spec, ThreadPool* pool) {
  PLEXUS_ASSIGN_OR_RETURN(bool weighted, spec.GetBool("weighted", true));
  AveragingOptions o{"fedavg", weighted ? "weighted=true" : "weighted=false", weighted};
  return AveragingFrom(spec, std::move(o), MakePlainStep(1.0), pool);
}

Result<std::unique_ptr<Aggregator>> MakeFedAvgM(StrategySpec& spec, ThreadPool* pool) {
  PLEXUS_ASSIGN_OR_RETURN(double momentum, spec.GetDouble("momentum", 0.9));
  PLEXUS_ASSIGN_OR_RETURN(double lr, spec.GetDouble("lr", 1.0));
  PLEXUS_ASSIGN_OR_RETURN(bool weighted, spec.GetBool("weighted", true));
  PLEXUS_RETURN_IF_ERROR(InRange("fedavgm", "momentum", momentum, 0, 1, true));
  PLEXUS_RETURN_IF_ERROR(Positive("fedavgm", "lr", lr));
  AveragingOptions o{"fedavgm", weighted ? "" : "weighted=false", weighted};
  return AveragingFrom(spec, std::move(o), MakeMomentumStep(lr, momentum), pool);
}

// DiLoCo's outer step (Douillard et al. 2023, arXiv 2311.08105): the clients' mean delta is minus
// the outer gradient; the paper steps it with Nesterov momentum, lr 0.7, momentum 0.9. The inner
// phase (H local steps) is the clients' training (--local-steps).
Result<std::unique_ptr<Aggregator>> MakeDiLoCo(StrategySpec& spec, ThreadPool* pool) {
  PLEXUS_ASSIGN_OR_RETURN(double lr, spec.GetDouble("outer_lr", 0.7));
  PLEXUS_ASSIGN_OR_RETURN(double momentum, spec.GetDouble("momentum", 0.9));
  PLEXUS_ASSIGN_OR_RETURN(bool nesterov, spec.GetBool("nesterov", true));
  PLEXUS_ASSIGN_OR_RETURN(bool weighted, spec.GetBool("weighted", true));
  PLEXUS_RETURN_IF_ERROR(InRange("diloco", "momentum", momentum, 0, 1, true));
  PLEXUS_RETURN_IF_ERROR(Positive("diloco", "outer_lr", lr));
  AveragingOptions o{"diloco", weighted ? "" : "weighted=false", weighted};
  return AveragingFrom(spec, std::move(o), MakeMomentumStep(lr, momentum, nesterov), pool);
}

// DeMo (Peng, Quesnelle and Kingma 2024): the clients send their momentum's fast components (the
// dct codec with a decaying residual, one plain SGD step per task); the server steps by the sign
// of their mean, x += lr * sign(d), as the paper's signum does. lr is the step per value.
Result<std::unique_ptr<Aggregator>> MakeDeMo(StrategySpec& spec, ThreadPool* pool) {
  PLEXUS_ASSIGN_OR_RETURN(double lr, spec.GetDouble("lr", 0.001));
  PLEXUS_ASSIGN_OR_RETURN(bool weighted, spec.GetBool("weighted", true));
  PLEXUS_RETURN_IF_ERROR(Positive("demo", "lr", lr));
  AveragingOptions o{"demo", weighted ? "" : "weighted=false", weighted};
  return MakeAveraging(std::move(o), MakeSignStep(lr), pool);
}

Result<std::unique_ptr<Aggregator>> MakeFedNova(StrategySpec& spec, ThreadPool* pool) {
  PLEXUS_ASSIGN_OR_RETURN(bool weighted, spec.GetBool("weighted", true));
  AveragingOptions o{"fednova", weighted ? "weighted=true" : "weighted=false", weighted, /*normalize_by_steps=*/true};
  return MakeAveraging(o, MakePlainStep(1.0), pool);
}

Result<std::unique_ptr<Aggregator>> MakeFedAdam(StrategySpec& spec, ThreadPool* pool) {
  return MakeAdaptive(spec, pool, AdaptiveKind::kAdam);
}
Result<std::unique_ptr<Aggregator>> MakeFedYogi(StrategySpec& spec, ThreadPool* pool) {
  return MakeAdaptive(spec, pool, AdaptiveKind::kYogi);
}
Result<std::unique_ptr<Aggregator>> MakeFedAdagrad(StrategySpec& spec, ThreadPool* pool) {
  return MakeAdaptive(spec, pool, AdaptiveKind::kAdagrad);
}

}  // namespace plexus
