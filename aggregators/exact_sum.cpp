#include "aggregators/exact_sum.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace plexus {
namespace {

static_assert(std::endian::native == std::endian::little, "the encoding writes int64 in host order");

constexpr char kMagic[4] = {'P', 'X', 'E', 'S'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 4 + 4 + 8 + 8 + 8;
constexpr double kValueScale = static_cast<double>(int64_t{1} << ExactSum::kValueFractionBits);
constexpr double kWeightScale = static_cast<double>(int64_t{1} << ExactSum::kWeightFractionBits);
// Doubles at or past 2^63 do not fit in int64.
constexpr double kInt64Limit = 9223372036854775808.0;
// Unchecked adds: each contribution below 2^51 units, every sum kept below 2^62.
constexpr double kFastLimit = 2251799813685248.0;    // 2^51
constexpr double kSumLimit = 4611686018427387904.0;  // 2^62

// x rounded to the nearest integer, halves to even (the IEEE default rounding, one instruction:
// the library is built with -fno-math-errno); false when it does not fit in int64.
bool RoundToInt64(double x, int64_t* out) {
  if (!(std::fabs(x) < kInt64Limit)) return false;
  *out = std::llrint(x);
  return true;
}

}  // namespace

Status ExactSum::Add(std::span<const float> delta, double weight, double value_scale) {
  if (!(value_scale > 0) || !std::isfinite(value_scale)) {
    return InvalidArgumentError("an update's value scale must be positive and finite (got " +
                                std::to_string(value_scale) + ")");
  }
  const double value_weight = weight * value_scale;  // exactly weight when value_scale is 1
  if (delta.size() == sums_.size() && weight > 0 && std::isfinite(weight) && weight * kWeightScale >= 0.5 &&
      AddWithoutChecks(delta, weight, value_weight)) {
    return Status::Ok();
  }
  return AddChecked(delta, weight, value_weight);
}

bool ExactSum::AddWithoutChecks(std::span<const float> delta, double weight, double value_weight) {
  // One pass for the largest magnitude (and whether every value is finite: NaN fails a <= max).
  // As a vector reduction (GCC leaves a float max scalar otherwise): a NaN may or may not reach
  // `largest` then, but it always sets `nonfinite`.
  const float* in = delta.data();
  const size_t len = delta.size();
  float largest = 0;
  int nonfinite = 0;
#pragma omp simd reduction(max : largest) reduction(| : nonfinite)
  for (size_t i = 0; i < len; ++i) {
    const float a = std::fabs(in[i]);
    nonfinite |= !(a <= std::numeric_limits<float>::max());
    largest = std::max(largest, a);
  }
  const bool finite = nonfinite == 0;
  const double most = value_weight * static_cast<double>(largest) * kValueScale;  // the largest |w·δ| in units
  int64_t w = 0;
  if (!finite || !(most < kFastLimit) || bound_ + most + 1 > kSumLimit || !RoundToInt64(weight * kWeightScale, &w) ||
      w <= 0 || weight_units_ > std::numeric_limits<int64_t>::max() - w ||
      count_ == std::numeric_limits<int64_t>::max()) {
    return false;
  }
  // |x| < 2^51: adding 1.5·2^52 rounds x to an integer (to even, the default rounding) in the
  // low bits of the double, exactly as llrint would; subtracting the constant's bits leaves it.
  constexpr double kMagic = 6755399441055744.0;  // 1.5 · 2^52
  const int64_t magic_bits = std::bit_cast<int64_t>(kMagic);
  const size_t n = sums_.size();
  int64_t* sums = sums_.data();
  const float* values = delta.data();
  for (size_t i = 0; i < n; ++i) {
    sums[i] +=
        std::bit_cast<int64_t>(value_weight * static_cast<double>(values[i]) * kValueScale + kMagic) - magic_bits;
  }
  bound_ += most + 1;
  weight_units_ += w;
  ++count_;
  return true;
}

Status ExactSum::AddChecked(std::span<const float> delta, double weight, double value_weight) {
  if (delta.size() != sums_.size()) {
    return InvalidArgumentError("an update of " + std::to_string(delta.size()) + " values for a sum of " +
                                std::to_string(sums_.size()));
  }
  int64_t w = 0;
  if (!(weight > 0) || !std::isfinite(weight) || !RoundToInt64(weight * kWeightScale, &w) || w <= 0) {
    return InvalidArgumentError("an update's weight must be positive, finite and at least 2^-17 (got " +
                                std::to_string(weight) + ")");
  }
  int64_t new_weight = 0, new_count = 0;
  if (__builtin_add_overflow(weight_units_, w, &new_weight) || __builtin_add_overflow(count_, 1, &new_count)) {
    return OutOfRangeError("the exact sum's weight leaves int64");
  }
  // One pass; a refused update takes back what it added (integers: exactly), so the sum is as it was.
  const auto take_back = [&](size_t end) {
    for (size_t k = 0; k < end; ++k) {
      int64_t v = 0;
      RoundToInt64(value_weight * static_cast<double>(delta[k]) * kValueScale, &v);
      sums_[k] -= v;
    }
  };
  for (size_t i = 0; i < delta.size(); ++i) {
    int64_t v = 0, sum = 0;
    if (!std::isfinite(delta[i])) {
      take_back(i);
      return InvalidArgumentError("an update holds a non-finite value at index " + std::to_string(i));
    }
    if (!RoundToInt64(value_weight * static_cast<double>(delta[i]) * kValueScale, &v) ||
        __builtin_add_overflow(sums_[i], v, &sum)) {
      take_back(i);
      return OutOfRangeError("the exact sum leaves int64 at index " + std::to_string(i) +
                             " (|sum of weight x value| reaches 2^39)");
    }
    sums_[i] = sum;
  }
  weight_units_ = new_weight;
  count_ = new_count;
  bound_ = 0;  // the bound from the sums themselves (this path is the rare one)
  for (int64_t s : sums_) bound_ = std::max(bound_, std::fabs(static_cast<double>(s)));
  return Status::Ok();
}

Status ExactSum::Merge(const ExactSum& other) {
  if (other.sums_.size() != sums_.size()) {
    return InvalidArgumentError("a partial sum of " + std::to_string(other.sums_.size()) + " values for a sum of " +
                                std::to_string(sums_.size()));
  }
  int64_t new_weight = 0, new_count = 0;
  if (__builtin_add_overflow(weight_units_, other.weight_units_, &new_weight) ||
      __builtin_add_overflow(count_, other.count_, &new_count)) {
    return OutOfRangeError("the exact sum's weight leaves int64");
  }
  for (size_t i = 0; i < sums_.size(); ++i) {
    int64_t sum = 0;
    if (__builtin_add_overflow(sums_[i], other.sums_[i], &sum)) {
      return OutOfRangeError("the exact sum leaves int64 at index " + std::to_string(i));
    }
  }
  for (size_t i = 0; i < sums_.size(); ++i) sums_[i] += other.sums_[i];
  weight_units_ = new_weight;
  count_ = new_count;
  bound_ += other.bound_;
  return Status::Ok();
}

Status ExactSum::MergeScaled(const ExactSum& other, double scale) {
  if (scale == 1.0) return Merge(other);
  if (!(scale > 0) || !std::isfinite(scale))
    return InvalidArgumentError("a partial sum scaled by a non-positive factor");
  ExactSum scaled;
  scaled.sums_.resize(other.sums_.size());
  scaled.count_ = other.count_;
  scaled.weight_units_ = other.weight_units_;
  for (size_t i = 0; i < other.sums_.size(); ++i) {
    if (!RoundToInt64(static_cast<double>(other.sums_[i]) * scale, &scaled.sums_[i])) {
      return OutOfRangeError("the partial sum scaled by " + std::to_string(scale) + " leaves int64 at index " +
                             std::to_string(i));
    }
    scaled.bound_ = std::max(scaled.bound_, std::fabs(static_cast<double>(scaled.sums_[i])));
  }
  return Merge(scaled);
}

double ExactSum::weight() const { return static_cast<double>(weight_units_) / kWeightScale; }

Status ExactSum::MeanInto(std::span<float> out) const {
  if (count_ == 0) return FailedPreconditionError("the mean of an empty sum");
  // Σ(w·δ)·2^24 / (Σw·2^16) = mean·2^8: one multiplication by 2^-8 (exact) after the division.
  const double per_unit = static_cast<double>(weight_units_);
  constexpr double kRescale = kWeightScale / kValueScale;
  for (size_t i = 0; i < sums_.size(); ++i) {
    out[i] = static_cast<float>(static_cast<double>(sums_[i]) / per_unit * kRescale);
  }
  return Status::Ok();
}

std::string ExactSum::Encode() const {
  std::string bytes(kHeaderBytes + sums_.size() * sizeof(int64_t), '\0');
  char* p = bytes.data();
  std::memcpy(p, kMagic, 4);
  std::memcpy(p + 4, &kVersion, 4);
  const uint64_t values = sums_.size();
  std::memcpy(p + 8, &values, 8);
  std::memcpy(p + 16, &weight_units_, 8);
  std::memcpy(p + 24, &count_, 8);
  if (!sums_.empty()) std::memcpy(p + kHeaderBytes, sums_.data(), sums_.size() * sizeof(int64_t));
  return bytes;
}

Result<ExactSum> ExactSum::Decode(std::string_view bytes, size_t values) {
  if (bytes.size() < kHeaderBytes || std::memcmp(bytes.data(), kMagic, 4) != 0) {
    return InvalidArgumentError("not an encoded exact sum");
  }
  uint32_t version = 0;
  uint64_t n = 0;
  ExactSum s;
  std::memcpy(&version, bytes.data() + 4, 4);
  std::memcpy(&n, bytes.data() + 8, 8);
  std::memcpy(&s.weight_units_, bytes.data() + 16, 8);
  std::memcpy(&s.count_, bytes.data() + 24, 8);
  if (version != kVersion) return InvalidArgumentError("an exact sum of encoding version " + std::to_string(version));
  if (n != values || bytes.size() - kHeaderBytes != n * sizeof(int64_t)) {
    return InvalidArgumentError("an exact sum of " + std::to_string(n) + " values in " + std::to_string(bytes.size()) +
                                " bytes where " + std::to_string(values) + " values are expected");
  }
  if (s.count_ < 0 || s.weight_units_ < 0 || (s.count_ == 0) != (s.weight_units_ == 0)) {
    return InvalidArgumentError("an exact sum whose weight and count disagree");
  }
  s.sums_.resize(n);
  if (n > 0) std::memcpy(s.sums_.data(), bytes.data() + kHeaderBytes, n * sizeof(int64_t));
  for (int64_t v : s.sums_) s.bound_ = std::max(s.bound_, std::fabs(static_cast<double>(v)));
  return s;
}

}  // namespace plexus
