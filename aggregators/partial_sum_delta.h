// PartialSumDelta: an edge aggregator's partial sum (ExactSum of its clients' weighted deltas)
// carried as one update's coded values (Update::coded), so that it travels the server's upload
// path like any coded update: received by the `exactsum` codec (compression/codec.h), stored as
// the bytes that came, folded by the strategies of the averaging family.
//
// Read as an update, a partial is its clients' weighted mean (values) with their total weight
// (the update's example count): a float strategy (fedavg) folding it sums what it would have
// summed from the clients' updates, up to float rounding. fedavg_exact takes the integers
// themselves (sum()), so a tree of aggregators publishes the bits a flat server does.
// It also lists its contributions: which client update (by path, task and hash) went into the
// sum, so that the root's round records name every client update of a tree.
// Immutable; thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "aggregators/exact_sum.h"
#include "core/coded_delta.h"
#include "core/round_record.h"
#include "core/update.h"

namespace plexus {

// One client update inside a partial sum: its client's path below the receiving server ("c0" for
// an edge's own client, "edge-a/c0" one level further down), the task it answered there, and the
// SHA-256 of its values as that edge received them (core/round_record.h, MergedUpdate).
struct PartialContribution {
  std::string client_path;
  std::string task_id;
  std::string update_sha256;

  friend bool operator==(const PartialContribution&, const PartialContribution&) = default;
};

// Their bytes (the `exactsum` codec's trailer): EncodeContributions, compression/codec.h.

// The client updates `update` stands for, as a round record's entries: a partial sum's
// contributions or a bundle's forwarded updates (aggregators/update_bundle.h), each path under
// update.client_id ("edge-a/c0"); any other update itself. An update's values are hashed when
// `hash` (at an edge, whose partial lists them) and not otherwise (a pass per upload).
std::vector<MergedUpdate> MergedEntriesOf(const Update& update, bool hash);

class PartialSumDelta;
// The partial sum `update` carries, or null for any other update.
const PartialSumDelta* PartialSumOf(const Update& update);

class PartialSumDelta final : public CodedDelta {
 public:
  // InvalidArgument for a sum of no updates (nothing to fold). `codec` and `bytes` are what the
  // store keeps (the codec's spec and the encoded sum as it arrived).
  static Result<std::shared_ptr<const PartialSumDelta>> Make(std::string codec, std::string bytes, ExactSum sum,
                                                             std::vector<PartialContribution> contributions = {});

  const ExactSum& sum() const { return sum_; }
  // The client updates summed (empty from an edge that listed none).
  const std::vector<PartialContribution>& contributions() const { return contributions_; }

  const std::string& codec() const override { return codec_; }
  const std::string& bytes() const override { return bytes_; }
  size_t num_values() const override { return mean_.size(); }
  void AddScaledTo(double* sum, size_t begin, size_t end, double w, bool first) const override;
  double SquaredNorm() const override;
  ModelState Materialize(const ModelState& layout) const override;

 private:
  PartialSumDelta(std::string codec, std::string bytes, ExactSum sum, std::vector<float> mean,
                  std::vector<PartialContribution> contributions)
      : codec_(std::move(codec)),
        bytes_(std::move(bytes)),
        sum_(std::move(sum)),
        mean_(std::move(mean)),
        contributions_(std::move(contributions)) {}

  const std::string codec_;
  const std::string bytes_;
  const ExactSum sum_;
  const std::vector<float> mean_;  // Σ(w·δ) / Σw, rounded to float32 once
  const std::vector<PartialContribution> contributions_;
};

}  // namespace plexus
