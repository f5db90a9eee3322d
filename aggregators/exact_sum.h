// ExactSum: a weighted sum of model deltas kept in integers, so that sums add exactly: whatever
// order the updates come in and however they are grouped (an edge aggregator's partial sum folded
// into its parent's, a tree of any depth), the total and the mean made from it are the same bits.
// The base of hierarchical aggregation (issue 41): a flat server that folds with it and a tree of
// aggregators over the same updates publish the same model SHA-256.
//
// Fixed point, documented scale: each contribution w·δ is rounded once, where it enters a sum, to
// the nearest multiple of 2^-kValueFractionBits (2^-24, about 6e-8; halves to even), and
// each weight to the nearest multiple of 2^-kWeightFractionBits (2^-16: examples counts are
// exact). From there on only int64 additions happen, each checked: a sum that would leave int64
// (|Σ w·δ| ≥ 2^39 per value, about 5.5e11, e.g. a million clients of 10,000 examples moving a
// value by 50) is OutOfRange and leaves the sum as it was. The mean is Σ(w·δ) / Σw, computed in
// double from the integers and rounded once to float32.
//
// Partial sums travel between processes as bytes (Encode/Decode): a header (magic, version,
// value count, weight, update count) and the little-endian int64 sums. Decode checks sizes.
// Value type; thread-compatible.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace plexus {

class ExactSum {
 public:
  static constexpr int kValueFractionBits = 24;
  static constexpr int kWeightFractionBits = 16;

  ExactSum() = default;
  explicit ExactSum(size_t values) : sums_(values, 0) {}

  // Adds weight·value_scale·delta to the sums and weight to Σw: value_scale shrinks a contribution
  // without taking weight from the others (a norm bound's clip, FedBuff's staleness factor, as
  // the float averaging does). InvalidArgument (the sum unchanged) for a delta of another size, a
  // non-finite value, or a weight or value_scale that is not positive and finite; OutOfRange on
  // overflow.
  Status Add(std::span<const float> delta, double weight, double value_scale = 1.0);
  // Adds another sum (an edge's partial). InvalidArgument for another size, OutOfRange on overflow;
  // the sum is unchanged then.
  Status Merge(const ExactSum& other);
  // Merge of `other` with its sums multiplied by `scale` (FedBuff's staleness factor of an edge's
  // partial, as Add's value_scale: its weight stays), each rounded once to its unit: exact only
  // for scale 1. InvalidArgument for a scale that is not positive and finite, OutOfRange as Merge;
  // the sum is unchanged then.
  Status MergeScaled(const ExactSum& other, double scale);

  size_t size() const { return sums_.size(); }
  int64_t count() const { return count_; }  // updates in the sum
  double weight() const;                    // Σw
  bool empty() const { return count_ == 0; }
  // The integer sums (units of 2^-kValueFractionBits) and weight (units of 2^-kWeightFractionBits).
  std::span<const int64_t> sums() const { return sums_; }
  int64_t weight_units() const { return weight_units_; }

  // out[i] = Σ(w·δ)[i] / Σw as float32. FailedPrecondition when empty. REQUIRES: out.size() == size().
  Status MeanInto(std::span<float> out) const;

  std::string Encode() const;
  // InvalidArgument for bytes that are not one encoded sum of `values` values.
  static Result<ExactSum> Decode(std::string_view bytes, size_t values);

 private:
  // Add when no value can overflow (checked in one pass first): false, and nothing changed, when
  // that cannot be shown; then AddChecked checks every value.
  bool AddWithoutChecks(std::span<const float> delta, double weight, double value_weight);
  Status AddChecked(std::span<const float> delta, double weight, double value_weight);

 public:
  friend bool operator==(const ExactSum& a, const ExactSum& b) {
    return a.sums_ == b.sums_ && a.weight_units_ == b.weight_units_ && a.count_ == b.count_;
  }

 private:
  std::vector<int64_t> sums_;
  int64_t weight_units_ = 0;
  int64_t count_ = 0;
  // An upper bound of max |sums_[i]|: while it stays far from 2^63, an update whose values are
  // small enough is added without a check per value (a loop the compiler vectorizes).
  double bound_ = 0;
};

}  // namespace plexus
