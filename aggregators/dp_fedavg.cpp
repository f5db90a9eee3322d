// DP-FedAvg: federated averaging with central differential privacy (McMahan et al., ICLR 2018),
// optionally with adaptive clipping (Andrew et al., NeurIPS 2021).
//
// Each client's delta is clipped to L2 norm `clip` before anything else, folded *unweighted*
// (examples do not weigh: a client claiming many examples must not count for more than C), the
// sum gets Gaussian noise of standard deviation noise·clip once per release, and it is divided by
// the fixed `expected` number of updates per release, not by how many arrived. So one client
// moves the release by at most clip / expected whatever it sends and whoever else drops out:
// dropouts cost signal, never privacy. A staleness weight (FedBuff) multiplies the clipped delta
// and is capped at 1, so it only lowers a client's share. The server step is x + lr·(noised mean).
//
// Adaptive clipping: the clip follows the `target` quantile of the update norms. Each release
// counts the updates with norm ≤ clip (as TensorFlow Privacy's quantile estimator does; Flower
// counts the clipped ones, which moves the clip the wrong way), adds N(0, count_noise²) to the
// count, and sets clip ← clip·exp(−clip_lr·(count / expected − target)). The count is a second
// release of the same data: the value noise multiplier is raised to (z⁻² − (2·count_noise)⁻²)^−½
// so that the two together cost what noise multiplier z alone costs (Andrew et al., §3.1).
//
// Noise from OpenSSL's secure generator unless `seed` is given (the simulator's reproducible
// runs; the stream of each release is derived from the seed and the base version, so a restart
// never repeats earlier noise). The adaptive clip is the strategy's saved state.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "aggregators/aggregator.h"
#include "aggregators/server_optimizer.h"
#include "aggregators/simd_kernels.h"
#include "aggregators/strategy_spec.h"
#include "aggregators/streaming_mean.h"
#include "aggregators/update_buffer.h"
#include "privacy/gaussian_noise.h"

namespace plexus {
namespace {

struct DpSettings {
  double clip = 0;         // C (the starting clip when adaptive)
  double noise = 0;        // z: the noise multiplier the accountant is told
  double expected = 0;     // the fixed denominator: updates expected per release
  double lr = 1;           // server learning rate
  bool adaptive = false;   // clip follows the target quantile
  double target = 0.5;     // quantile of update norms the clip tracks
  double clip_lr = 0.2;    // geometric step of the clip
  double count_noise = 0;  // standard deviation of the noise on the unclipped count
  std::optional<uint64_t> seed;
};

constexpr char kStateTag[] = "dpclip1";

class DpFedAvg final : public Aggregator {
 public:
  DpFedAvg(DpSettings s, ThreadPool* pool)
      : s_(s), pool_(pool), mean_(pool), step_(MakePlainStep(s.lr)), clip_(s.clip), value_noise_(ValueNoise(s)) {
    if (!s_.seed) secure_ = MakeSecureGaussianNoise();
  }

  // The noise multiplier of the values: z, raised when the count takes part of the budget.
  static double ValueNoise(const DpSettings& s) {
    if (!s.adaptive || s.noise == 0 || s.count_noise == 0) return s.noise;
    return 1.0 / std::sqrt(1.0 / (s.noise * s.noise) - 1.0 / (4 * s.count_noise * s.count_noise));
  }

  Status Begin(const ModelState& base) override {
    base_ = base;
    mean_.Reset(base.num_params());
    unclipped_ = 0;
    begun_ = true;
    return Status::Ok();
  }

  Status Fold(const Update& u) override { return FoldTimes(u, 1.0); }
  Status FoldScaled(Update& u, double value_scale) override { return FoldTimes(u, std::min(value_scale, 1.0)); }
  bool folds_coded() const override { return true; }
  size_t num_folded() const override { return mean_.count(); }

  // One pass over the sum for the whole batch (after each update's norm): the path a round's
  // updates take. Anything unusual (coded values, a wrong layout, a non-finite value) folds one
  // by one from there, which reports it.
  Status FoldAll(std::span<const Update* const> updates) override {
    if (!begun_) return FailedPreconditionError("dp_fedavg: Fold before Begin");
    std::vector<const float*> deltas;
    std::vector<double> scales;
    int64_t unclipped = 0;
    for (size_t i = 0; i < updates.size(); ++i) {
      const Update& u = *updates[i];
      double norm = 0;
      if (!u.coded && u.delta.CheckSameLayout(base_).ok()) {
        norm = std::sqrt(simd::SquaredNorm(u.delta.data().data(), u.delta.num_params()));
      }
      if (u.coded || !std::isfinite(norm) || !u.delta.CheckSameLayout(base_).ok()) {
        FoldBatch(deltas, scales, unclipped);
        for (size_t j = i; j < updates.size(); ++j) PLEXUS_RETURN_IF_ERROR(Fold(*updates[j]));
        return Status::Ok();
      }
      if (norm <= clip_) ++unclipped;
      deltas.push_back(u.delta.data().data());
      scales.push_back(norm > clip_ ? clip_ / norm : 1.0);
    }
    FoldBatch(deltas, scales, unclipped);
    return Status::Ok();
  }

  Result<ModelState> Finalize() override {
    if (!begun_ || mean_.count() == 0) return FailedPreconditionError("dp_fedavg: no updates to aggregate");
    // Noised in place: the sum is released once and the next Begin starts over.
    const std::span<double> noised = mean_.mutable_sum();
    begun_ = false;  // also when the noise fails: a partly noised sum must never be released
    std::unique_ptr<GaussianNoise> seeded;
    GaussianNoise* noise = secure_.get();
    if (s_.seed) {
      seeded = MakeSeededGaussianNoise(*s_.seed + 0x9e3779b97f4a7c15ULL * (base_.version() + 1));
      noise = seeded.get();
    }
    if (value_noise_ > 0) PLEXUS_RETURN_IF_ERROR(noise->Add(noised, value_noise_ * clip_, pool_));
    double next_clip = clip_;
    if (s_.adaptive) {
      double count[1] = {static_cast<double>(unclipped_)};
      if (s_.count_noise > 0) PLEXUS_RETURN_IF_ERROR(noise->Add(count, s_.count_noise));
      next_clip = clip_ * std::exp(-s_.clip_lr * (count[0] / s_.expected - s_.target));
    }
    ModelState next = step_->Step(base_, noised, 1.0 / s_.expected, pool_);
    clip_ = next_clip;
    return next;
  }

  std::string SaveState() const override {
    if (!s_.adaptive) return {};
    std::string state(kStateTag, sizeof kStateTag);
    state.append(reinterpret_cast<const char*>(&clip_), sizeof clip_);
    return state;
  }

  Status RestoreState(std::string_view state) override {
    if (state.empty()) return Status::Ok();
    double clip = 0;
    if (!s_.adaptive || state.size() != sizeof kStateTag + sizeof clip ||
        std::memcmp(state.data(), kStateTag, sizeof kStateTag) != 0) {
      return InvalidArgumentError("dp_fedavg: the saved state is not an adaptive clip");
    }
    std::memcpy(&clip, state.data() + sizeof kStateTag, sizeof clip);
    if (!(clip > 0) || !std::isfinite(clip))
      return InvalidArgumentError("dp_fedavg: a saved clip that is not positive");
    clip_ = clip;
    return Status::Ok();
  }

  std::string Describe() const override {
    char text[256];
    std::snprintf(text, sizeof text, "dp_fedavg(clip=%g,noise=%g,expected=%g%s,noise_source=%s)", s_.clip, s_.noise,
                  s_.expected, s_.adaptive ? ",adaptive" : "",
                  (s_.seed ? MakeSeededGaussianNoise(*s_.seed)->Describe() : secure_->Describe()).c_str());
    std::string out = text;
    if (s_.lr != 1) out.insert(out.size() - 1, ",lr=" + std::to_string(s_.lr));
    return out;
  }

 private:
  Status FoldTimes(const Update& u, double scale) {
    if (!begun_) return FailedPreconditionError("dp_fedavg: Fold before Begin");
    PLEXUS_RETURN_IF_ERROR(CheckUpdate(u, base_, /*needs_examples=*/false, "dp_fedavg", /*takes_coded=*/true));
    const double norm =
        std::sqrt(u.coded ? u.coded->SquaredNorm() : simd::SquaredNorm(u.delta.data().data(), u.delta.num_params()));
    if (!std::isfinite(norm)) return InvalidArgumentError("dp_fedavg: update from " + u.client_id + " is not finite");
    if (norm <= clip_) ++unclipped_;
    const double factor = scale * (norm > clip_ ? clip_ / norm : 1.0);
    if (u.coded) {
      mean_.FoldCoded(*u.coded, 1.0, factor);
    } else {
      mean_.Fold(u.delta.data(), 1.0, factor);
    }
    return Status::Ok();
  }

  // Folds finite deltas of the base's layout with their clip factors.
  void FoldBatch(std::span<const float* const> deltas, std::span<const double> scales, int64_t unclipped) {
    if (deltas.empty()) return;
    const std::vector<double> weights(deltas.size(), 1.0);
    mean_.FoldBatch(deltas, weights, scales);  // every input is finite: its norm was
    unclipped_ += unclipped;
  }

  const DpSettings s_;
  ThreadPool* const pool_;
  StreamingMean mean_;
  std::unique_ptr<ServerOptimizer> step_;
  std::unique_ptr<GaussianNoise> secure_;
  ModelState base_;
  double clip_;
  const double value_noise_;
  int64_t unclipped_ = 0;
  bool begun_ = false;
};

Status Check(bool ok, const std::string& what) {
  return ok ? Status::Ok() : InvalidArgumentError("strategy 'dp_fedavg': " + what);
}

}  // namespace

Result<std::unique_ptr<Aggregator>> MakeDpFedAvg(StrategySpec& spec, ThreadPool* pool) {
  DpSettings s;
  PLEXUS_ASSIGN_OR_RETURN(s.clip, spec.GetDouble("clip", 0));
  PLEXUS_ASSIGN_OR_RETURN(s.noise, spec.GetDouble("noise", -1));
  PLEXUS_ASSIGN_OR_RETURN(s.expected, spec.GetDouble("expected", 0));
  PLEXUS_ASSIGN_OR_RETURN(s.lr, spec.GetDouble("lr", 1));
  PLEXUS_ASSIGN_OR_RETURN(s.adaptive, spec.GetBool("adaptive", false));
  PLEXUS_ASSIGN_OR_RETURN(s.target, spec.GetDouble("target", 0.5));
  PLEXUS_ASSIGN_OR_RETURN(s.clip_lr, spec.GetDouble("clip_lr", 0.2));
  PLEXUS_ASSIGN_OR_RETURN(s.count_noise, spec.GetDouble("count_noise", -1));
  PLEXUS_ASSIGN_OR_RETURN(std::string seed, spec.GetString("seed", ""));
  PLEXUS_RETURN_IF_ERROR(Check(s.clip > 0 && std::isfinite(s.clip), "clip must be a positive number"));
  PLEXUS_RETURN_IF_ERROR(Check(s.noise >= 0 && std::isfinite(s.noise), "noise must be given, at least 0"));
  PLEXUS_RETURN_IF_ERROR(Check(s.expected >= 1 && std::isfinite(s.expected),
                               "expected (updates per release, the fixed denominator) must be at least 1"));
  PLEXUS_RETURN_IF_ERROR(Check(s.lr > 0 && std::isfinite(s.lr), "lr must be positive"));
  if (s.adaptive) {
    // Andrew et al.'s default is a twentieth of the expected updates; with few updates per
    // release that would take the whole budget from the values (it must exceed noise / 2), so
    // the default is at least the noise multiplier (the values' noise then rises by at most 15%).
    if (s.count_noise < 0) s.count_noise = std::max(s.expected / 20, s.noise);
    PLEXUS_RETURN_IF_ERROR(Check(s.target > 0 && s.target < 1, "target must be a quantile in (0, 1)"));
    PLEXUS_RETURN_IF_ERROR(Check(s.clip_lr > 0 && std::isfinite(s.clip_lr), "clip_lr must be positive"));
    PLEXUS_RETURN_IF_ERROR(Check(s.count_noise >= 0 && std::isfinite(s.count_noise), "count_noise must be at least 0"));
    PLEXUS_RETURN_IF_ERROR(Check(s.noise == 0 || s.count_noise == 0 || 2 * s.count_noise > s.noise,
                                 "count_noise must exceed noise / 2: the count's share of the budget would leave the "
                                 "values none"));
    PLEXUS_RETURN_IF_ERROR(
        Check(s.noise == 0 || s.count_noise > 0, "adaptive clipping with noise needs count_noise > 0"));
  } else if (s.count_noise >= 0) {
    return InvalidArgumentError("strategy 'dp_fedavg': count_noise is for adaptive=true");
  }
  if (!seed.empty()) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(seed.c_str(), &end, 10);
    PLEXUS_RETURN_IF_ERROR(Check(*end == '\0' && seed[0] != '-', "seed must be a non-negative integer"));
    s.seed = v;
  }
  return std::unique_ptr<Aggregator>(std::make_unique<DpFedAvg>(s, pool));
}

}  // namespace plexus
