#include "privacy/secagg_exchange.h"

#include <algorithm>
#include <cmath>

namespace plexus::secagg {

Result<WeightedEncoding> WeightedEncoding::For(const Setup& setup) {
  if (!(setup.clip > 0) || !std::isfinite(setup.clip)) {
    return InvalidArgumentError("secagg: the clip must be positive and finite");
  }
  if (setup.weight_cap < 1) return InvalidArgumentError("secagg: the weight cap must be at least one example");
  if (setup.params.length < 2) return InvalidArgumentError("secagg: an input holds the update and its weight");
  if (!(setup.l2_clip >= 0) || !std::isfinite(setup.l2_clip)) {
    return InvalidArgumentError("secagg: the L2 clip must be finite and not negative");
  }
  if (!(setup.noise_std >= 0) || !std::isfinite(setup.noise_std)) {
    return InvalidArgumentError("secagg: the members' noise must be finite and not negative");
  }
  PLEXUS_ASSIGN_OR_RETURN(FixedPoint fixed,
                          FixedPoint::Create(setup.clip, static_cast<int64_t>(setup.params.members.size())));
  return WeightedEncoding(fixed, setup.clip, setup.weight_cap, setup.params.length, setup.l2_clip, setup.noise_std);
}

Result<std::vector<uint32_t>> WeightedEncoding::Encode(std::span<const float> delta, int64_t examples,
                                                       const Secret32& seed, int64_t* clipped,
                                                       GaussianNoise* noise) const {
  if (delta.size() + 1 != length_) {
    return InvalidArgumentError("secagg: an update of " + std::to_string(delta.size()) + " values, the round takes " +
                                std::to_string(length_ - 1));
  }
  if (examples < 1) return InvalidArgumentError("secagg: an update trained on no example");
  const double w = static_cast<double>(std::min(examples, weight_cap_)) / static_cast<double>(weight_cap_);
  // The group's L2 clip and noise (central and distributed DP); neither without DP.
  Result<std::vector<double>> scaled = ClipToNormAndAddNoise(delta, l2_clip_, noise_std_, noise);
  if (!scaled.ok()) return scaled.status().WithContext("secagg");
  const std::vector<double>& values = *scaled;
  std::vector<float> weighted(length_);
  int64_t outside = 0;
  for (size_t i = 0; i < delta.size(); ++i) {
    const double v = values[i];
    if (v > clip_ || v < -clip_) ++outside;
    weighted[i] = static_cast<float>(w * std::clamp(v, -clip_, clip_));
  }
  weighted.back() = static_cast<float>(w * clip_);
  std::vector<uint32_t> out(length_);
  PLEXUS_RETURN_IF_ERROR(fixed_.Encode(weighted, seed, out));
  if (clipped) *clipped = outside;
  return out;
}

Result<WeightedEncoding::Mean> WeightedEncoding::DecodeMean(std::span<const uint32_t> sum, int64_t inputs) const {
  if (sum.size() != length_) return InvalidArgumentError("secagg: a sum of another length than the round's");
  std::vector<double> decoded(length_);
  PLEXUS_RETURN_IF_ERROR(fixed_.DecodeSum(sum, inputs, decoded));
  Mean mean;
  mean.total_weight = decoded.back() / clip_;
  // Rounding may leave a little weight below zero when every input's weight was tiny.
  if (!(mean.total_weight > 0)) return InvalidArgumentError("secagg: the group's sum carries no weight");
  mean.delta.resize(length_ - 1);
  for (size_t i = 0; i + 1 < length_; ++i) mean.delta[i] = static_cast<float>(decoded[i] / mean.total_weight);
  return mean;
}

double WeightedEncoding::MeanBound(int64_t inputs, double total_weight) const {
  return 2.0 * static_cast<double>(inputs) * fixed_.step() / total_weight + clip_ * 0x1.0p-23;
}

}  // namespace plexus::secagg
