// UpdateBundle: the client updates an edge aggregator forwards raw to its parent (plexus server
// --upstream-forward raw, issue 41), carried as one upload's coded values (the `bundle` codec,
// compression/codec.h), so that a rule that needs every update at one place (median, Krum,
// trimmed mean, Bulyan, ...) runs at the root over every client update of the tree. The parent's
// engine folds each inner update as if its client had sent it (updates()), under the path
// "edge/client". Read as one update, a bundle is its updates' plain mean, and its squared norm
// the largest of theirs (what a norm gate checks: one update beyond the bound refuses the bundle).
// Made only by the codec from bytes it checked: every inner update has the bundle's size, finite
// values, examples and steps. Immutable; thread-safe.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/coded_delta.h"
#include "core/update.h"

namespace plexus {

class UpdateBundle final : public CodedDelta {
 public:
  // InvalidArgument for a bundle of no updates, or updates of another size than `values`.
  static Result<std::shared_ptr<const UpdateBundle>> Make(std::string codec, std::string bytes, size_t values,
                                                          std::vector<Update> updates);

  // The client updates, each with its path below the sender as client id ("c0", "edge-c/c0").
  const std::vector<Update>& updates() const { return updates_; }

  const std::string& codec() const override { return codec_; }
  const std::string& bytes() const override { return bytes_; }
  size_t num_values() const override { return values_; }
  void AddScaledTo(double* sum, size_t begin, size_t end, double w, bool first) const override;
  double SquaredNorm() const override;
  ModelState Materialize(const ModelState& layout) const override;

 private:
  UpdateBundle(std::string codec, std::string bytes, size_t values, std::vector<Update> updates)
      : codec_(std::move(codec)), bytes_(std::move(bytes)), values_(values), updates_(std::move(updates)) {}

  const std::string codec_;
  const std::string bytes_;
  const size_t values_;
  const std::vector<Update> updates_;
};

// The updates `update` stands for: a bundle's inner updates with the sender's id before their
// paths ("edge-a/c0"), or the update itself (copies: for folding under their own names).
std::vector<Update> UnbundledUpdates(const Update& update);
// The same without copies or renaming (for counting them): a view into the bundle, or `update`.
std::span<const Update> BundledOrSelf(const Update& update);

}  // namespace plexus
