// PartialSumDelta: an edge aggregator's partial sum (ExactSum of its clients' weighted deltas)
// carried as one update's coded values (Update::coded), so that it travels the server's upload
// path like any coded update: received by the `exactsum` codec (compression/codec.h), stored as
// the bytes that came, folded by the strategies of the averaging family.
//
// Read as an update, a partial is its clients' weighted mean (values) with their total weight
// (the update's example count): a float strategy (fedavg) folding it sums what it would have
// summed from the clients' updates, up to float rounding. fedavg_exact takes the integers
// themselves (sum()), so a tree of aggregators publishes the bits a flat server does.
// Immutable; thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "aggregators/exact_sum.h"
#include "core/coded_delta.h"

namespace plexus {

class PartialSumDelta final : public CodedDelta {
 public:
  // InvalidArgument for a sum of no updates (nothing to fold). `codec` and `bytes` are what the
  // store keeps (the codec's spec and the encoded sum as it arrived).
  static Result<std::shared_ptr<const PartialSumDelta>> Make(std::string codec, std::string bytes, ExactSum sum);

  const ExactSum& sum() const { return sum_; }

  const std::string& codec() const override { return codec_; }
  const std::string& bytes() const override { return bytes_; }
  size_t num_values() const override { return mean_.size(); }
  void AddScaledTo(double* sum, size_t begin, size_t end, double w, bool first) const override;
  double SquaredNorm() const override;
  ModelState Materialize(const ModelState& layout) const override;

 private:
  PartialSumDelta(std::string codec, std::string bytes, ExactSum sum, std::vector<float> mean)
      : codec_(std::move(codec)), bytes_(std::move(bytes)), sum_(std::move(sum)), mean_(std::move(mean)) {}

  const std::string codec_;
  const std::string bytes_;
  const ExactSum sum_;
  const std::vector<float> mean_;  // Σ(w·δ) / Σw, rounded to float32 once
};

}  // namespace plexus
