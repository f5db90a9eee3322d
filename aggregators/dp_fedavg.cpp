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
// summed=true (central DP over secure aggregation): each update folded is already a group's sum
// of deltas its members clipped to `clip` themselves (the server never sees one delta), so it is
// folded as it is; the noise and the fixed denominator are as above, and so is the guarantee.
// noised_by_members=true (distributed DP): the members added the noise as well, and this adds none.
//
// Adaptive clipping: the clip follows the `target` quantile of the update norms. Each release
// counts the updates with norm ≤ clip (as TensorFlow Privacy's quantile estimator does; Flower
// counts the clipped ones, which moves the clip the wrong way), adds N(0, count_noise²) to the
// count, and sets clip ← clip·exp(−clip_lr·(count / expected − target)). The count is a second
// release of the same data: the value noise multiplier is raised to (z⁻² − (2·count_noise)⁻²)^−½
// so that the two together cost what noise multiplier z alone costs (Andrew et al., §3.1).
//
// Under a tree of aggregators (central DP at the root): an edge's partial sum (partial_sum_delta.h)
// is folded as the sum it is, unclipped, once checked: unweighted (its weight is its count k) and
// of norm at most k·clip, which is what k deltas each within the clip can reach. The edges clip
// (norm_bound:max=C,exact=true,weighted=false) and are trusted to clip each delta, as a secure
// aggregation's members are; the check catches an edge that does not clip or weighs. `expected`
// counts client updates per release, not edges. Adaptive clipping refuses partial sums (its
// count of the updates under the clip cannot see inside one).
//
// Noise from OpenSSL's secure generator unless `seed` is given (the simulator's reproducible
// runs; the stream of each release is derived from the seed and the base version, so a restart
// never repeats earlier noise). The adaptive clip is the strategy's saved state.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include "aggregators/aggregator.h"
#include "aggregators/clipped_sum.h"
#include "aggregators/dp_release.h"
#include "aggregators/partial_sum_delta.h"
#include "aggregators/server_optimizer.h"
#include "aggregators/strategy_spec.h"
#include "privacy/gaussian_noise.h"

namespace plexus {
namespace {

// clip is the starting clip when adaptive; noise the multiplier the accountant is told.
struct DpSettings : DpRelease {
  bool adaptive = false;           // clip follows the target quantile
  double target = 0.5;             // quantile of update norms the clip tracks
  double clip_lr = 0.2;            // geometric step of the clip
  double count_noise = 0;          // standard deviation of the noise on the unclipped count
  bool summed = false;             // updates are secure aggregation sums of deltas clipped by their members
  bool noised_by_members = false;  // summed: the members added the noise too (distributed DP)
};

constexpr char kStateTag[] = "dpclip1";

class DpFedAvg final : public Aggregator {
 public:
  DpFedAvg(DpSettings s, ThreadPool* pool)
      : s_(s), pool_(pool), sum_(pool), step_(MakePlainStep(s.lr)), clip_(s.clip), value_noise_(ValueNoise(s)) {
    if (!s_.seed) secure_ = MakeSecureGaussianNoise();
  }

  // The noise multiplier of the values: z, raised when the count takes part of the budget.
  static double ValueNoise(const DpSettings& s) {
    if (!s.adaptive || s.noise == 0 || s.count_noise == 0) return s.noise;
    return 1.0 / std::sqrt(1.0 / (s.noise * s.noise) - 1.0 / (4 * s.count_noise * s.count_noise));
  }

  Status Begin(const ModelState& base) override {
    base_ = base;
    sum_.Reset(base);
    begun_ = true;
    return Status::Ok();
  }

  Status Fold(const Update& u) override { return FoldTimes(u, 1.0); }
  Status FoldScaled(Update& u, double value_scale) override { return FoldTimes(u, std::min(value_scale, 1.0)); }
  bool folds_coded() const override { return true; }
  bool takes_partial_sums() const override { return !s_.adaptive; }
  size_t num_folded() const override { return sum_.count(); }

  Status FoldAll(std::span<const Update* const> updates) override {
    if (!begun_) return FailedPreconditionError("dp_fedavg: Fold before Begin");
    if (std::none_of(updates.begin(), updates.end(), [](const Update* u) { return PartialSumOf(*u) != nullptr; })) {
      return sum_.FoldAll(updates, FoldClip(), "dp_fedavg");
    }
    for (const Update* u : updates) PLEXUS_RETURN_IF_ERROR(FoldTimes(*u, 1.0));
    return Status::Ok();
  }

  Result<ModelState> Finalize() override {
    if (!begun_ || sum_.count() == 0) return FailedPreconditionError("dp_fedavg: no updates to aggregate");
    // Noised in place: the sum is released once and the next Begin starts over.
    const std::span<double> noised = sum_.mutable_sum();
    begun_ = false;  // also when the noise fails: a partly noised sum must never be released
    std::unique_ptr<GaussianNoise> seeded;
    GaussianNoise* noise = secure_.get();
    if (s_.seed) {
      seeded = MakeSeededGaussianNoise(*s_.seed + 0x9e3779b97f4a7c15ULL * (base_.version() + 1));
      noise = seeded.get();
    }
    if (value_noise_ > 0 && !s_.noised_by_members) {
      PLEXUS_RETURN_IF_ERROR(noise->Add(noised, value_noise_ * clip_, pool_));
    }
    double next_clip = clip_;
    if (s_.adaptive) {
      double count[1] = {static_cast<double>(sum_.unclipped())};
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
    std::snprintf(text, sizeof text, "dp_fedavg(clip=%g,noise=%g,expected=%g%s%s,noise_source=%s)", s_.clip, s_.noise,
                  s_.expected, s_.adaptive ? ",adaptive" : "",
                  s_.noised_by_members ? ",summed,noised_by_members" : (s_.summed ? ",summed" : ""),
                  (s_.seed ? MakeSeededGaussianNoise(*s_.seed)->Describe() : secure_->Describe()).c_str());
    std::string out = text;
    if (s_.lr != 1) out.insert(out.size() - 1, ",lr=" + std::to_string(s_.lr));
    return out;
  }

 private:
  Status FoldTimes(const Update& u, double scale) {
    if (!begun_) return FailedPreconditionError("dp_fedavg: Fold before Begin");
    if (const PartialSumDelta* partial = PartialSumOf(u)) {
      if (s_.adaptive) {
        return InvalidArgumentError("dp_fedavg: a partial sum from " + u.client_id +
                                    ", but adaptive clipping counts the updates under the clip, which a partial sum "
                                    "hides: run a fixed clip at a root over edges");
      }
      return sum_.FoldPartial(u, *partial, clip_, scale, "dp_fedavg");
    }
    return sum_.Fold(u, FoldClip(), scale, "dp_fedavg");
  }
  // Summed updates were clipped by their members, each to clip_.
  double FoldClip() const { return s_.summed ? std::numeric_limits<double>::infinity() : clip_; }

  const DpSettings s_;
  ThreadPool* const pool_;
  ClippedSum sum_;
  std::unique_ptr<ServerOptimizer> step_;
  std::unique_ptr<GaussianNoise> secure_;
  ModelState base_;
  double clip_;
  const double value_noise_;
  bool begun_ = false;
};

Status Check(bool ok, const std::string& what) {
  return ok ? Status::Ok() : InvalidArgumentError("strategy 'dp_fedavg': " + what);
}

}  // namespace

Result<std::unique_ptr<Aggregator>> MakeDpFedAvg(StrategySpec& spec, ThreadPool* pool) {
  DpSettings s;
  PLEXUS_ASSIGN_OR_RETURN(static_cast<DpRelease&>(s), ReadDpRelease(spec, "dp_fedavg"));
  PLEXUS_ASSIGN_OR_RETURN(s.adaptive, spec.GetBool("adaptive", false));
  PLEXUS_ASSIGN_OR_RETURN(s.target, spec.GetDouble("target", 0.5));
  PLEXUS_ASSIGN_OR_RETURN(s.clip_lr, spec.GetDouble("clip_lr", 0.2));
  PLEXUS_ASSIGN_OR_RETURN(s.count_noise, spec.GetDouble("count_noise", -1));
  PLEXUS_ASSIGN_OR_RETURN(s.summed, spec.GetBool("summed", false));
  PLEXUS_ASSIGN_OR_RETURN(s.noised_by_members, spec.GetBool("noised_by_members", false));
  if (s.noised_by_members && !s.summed) {
    return InvalidArgumentError(
        "strategy 'dp_fedavg': noised_by_members is for summed=true (secure groups whose "
        "members add the noise)");
  }
  if (s.summed && s.adaptive) {
    return InvalidArgumentError(
        "strategy 'dp_fedavg': adaptive clipping counts the updates under the clip, which summed updates (secure "
        "aggregation) hide; use a fixed clip");
  }
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
  return std::unique_ptr<Aggregator>(std::make_unique<DpFedAvg>(s, pool));
}

}  // namespace plexus
