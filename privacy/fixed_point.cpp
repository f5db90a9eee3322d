#include "privacy/fixed_point.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "privacy/secagg_crypto.h"

namespace plexus {

Result<FixedPoint> FixedPoint::Create(double range, int64_t max_inputs) {
  if (!(range > 0) || !std::isfinite(range)) return InvalidArgumentError("fixed point: the range must be positive");
  if (max_inputs < 1) return InvalidArgumentError("fixed point: at least one input");
  const uint64_t levels = std::numeric_limits<uint32_t>::max() / static_cast<uint64_t>(max_inputs);
  if (levels < 2) return InvalidArgumentError("fixed point: too many inputs for 32 bits");
  return FixedPoint(range, max_inputs, static_cast<uint32_t>(levels));
}

Status FixedPoint::Encode(std::span<const float> values, const Secret32& seed, std::span<uint32_t> out) const {
  // The rounding's uniforms: a keystream added to zeros is the keystream itself.
  std::fill(out.begin(), out.end(), 0u);
  PLEXUS_RETURN_IF_ERROR(AddMask(out, seed, +1));
  const double scale = levels_ / (2 * range_);
  for (size_t i = 0; i < values.size(); ++i) {
    const double v = std::isfinite(values[i]) ? std::clamp(static_cast<double>(values[i]), -range_, range_)
                                              : 0.0;  // callers refuse non-finite updates before this
    const double level = (v + range_) * scale;
    const double floor = std::floor(level);
    const double u = out[i] * 0x1.0p-32;  // uniform in [0, 1)
    const double rounded = std::min(floor + (u < level - floor ? 1.0 : 0.0), static_cast<double>(levels_));
    out[i] = static_cast<uint32_t>(rounded);
  }
  return Status::Ok();
}

Status FixedPoint::DecodeSum(std::span<const uint32_t> sum, int64_t inputs, std::span<double> out) const {
  if (inputs < 0 || inputs > max_inputs_) {
    return InvalidArgumentError("fixed point: a sum of " + std::to_string(inputs) + " inputs, at most " +
                                std::to_string(max_inputs_) + " fit in 32 bits");
  }
  const double step = 2 * range_ / levels_;
  for (size_t i = 0; i < sum.size(); ++i) out[i] = sum[i] * step - static_cast<double>(inputs) * range_;
  return Status::Ok();
}

}  // namespace plexus
