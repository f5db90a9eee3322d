// FixedPoint: how secure aggregation turns float deltas into the uint32 values it sums mod 2^32
// and back. Each value is clipped to [−range, range], mapped onto the integers 0…levels and
// rounded stochastically (up with probability equal to the fraction, so the rounding is unbiased);
// `levels` is chosen so that the sum of up to `max_inputs` inputs never wraps past 2^32. Decoding
// a sum of k inputs gives the sum of their clipped values to within k·step, where step =
// 2·range/levels is the rounding bound of one value. Value type; thread-compatible.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "privacy/shamir.h"

namespace plexus {

class FixedPoint {
 public:
  // InvalidArgument for a range that is not positive and finite or max_inputs < 1.
  static Result<FixedPoint> Create(double range, int64_t max_inputs);

  // out[i] = the stochastically rounded level of clip(values[i]); the rounding's randomness is a
  // ChaCha20 stream of `seed` (a client's own secret). REQUIRES: out.size() == values.size().
  Status Encode(std::span<const float> values, const Secret32& seed, std::span<uint32_t> out) const;
  // The sum of `inputs` encoded vectors' clipped values, from their sum mod 2^32.
  // InvalidArgument for more inputs than max_inputs. REQUIRES: out.size() == sum.size().
  Status DecodeSum(std::span<const uint32_t> sum, int64_t inputs, std::span<double> out) const;

  double range() const { return range_; }
  uint32_t levels() const { return levels_; }
  // The most one decoded value can be off by, per input summed: 2·range / levels.
  double step() const { return 2 * range_ / levels_; }

 private:
  FixedPoint(double range, int64_t max_inputs, uint32_t levels)
      : range_(range), max_inputs_(max_inputs), levels_(levels) {}
  double range_;
  int64_t max_inputs_;
  uint32_t levels_;
};

}  // namespace plexus
