// Partitioners: split a labelled dataset among N clients, reproducibly from a seed.
//   iid           shuffle, then equal contiguous slices
//   dirichlet:A   per class, proportions ~ Dir_N(A) (label skew; A=0.1 severe, 0.5 moderate)
//   shards:S      sort by label, cut into N*S equal shards, S random shards per client
// Every client computes the same partition from the same seed, so a client process needs only
// its index. Stateless functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace plexus {

struct PartitionSpec {
  enum class Kind { kIid, kDirichlet, kShards };
  Kind kind = Kind::kIid;
  double alpha = 0.5;  // dirichlet
  int64_t shards = 2;  // shards per client

  // "iid", "dirichlet:0.5", "shards:2"; InvalidArgument otherwise.
  static Result<PartitionSpec> Parse(std::string_view text);
  std::string ToString() const;
};

// Indices into `labels` for each of `num_clients` clients. InvalidArgument when a client
// would be left empty (more clients than examples, or too many shards).
Result<std::vector<std::vector<uint32_t>>> PartitionIndices(const std::vector<uint8_t>& labels,
                                                            const PartitionSpec& spec, int64_t num_clients,
                                                            uint64_t seed);

// A partition drawn with replacement, for populations larger than the data can split: client c
// gets `examples` indices from its own seeded stream, materialised only when asked for (a million
// clients cost nothing until they train). iid: uniform over the data; dirichlet:A: the client's
// own class proportions ~ Dir_10(A), then uniform within each class; shards:S: S label-sorted
// shards of examples/S consecutive examples each, chosen at random. Samples of different
// clients overlap. Immutable after Make; thread-safe.
class SampledPartition {
 public:
  // InvalidArgument for empty labels or a non-positive example count.
  static Result<SampledPartition> Make(const std::vector<uint8_t>& labels, const PartitionSpec& spec, int64_t examples,
                                       uint64_t seed);
  std::vector<uint32_t> For(uint64_t client) const;
  int64_t examples_per_client() const { return examples_; }

 private:
  PartitionSpec spec_;
  int64_t examples_ = 0;
  uint64_t seed_ = 0;
  std::vector<uint32_t> by_label_;   // example indices sorted by label (stable)
  std::vector<size_t> label_begin_;  // by_label_[label_begin_[c], label_begin_[c + 1]) hold class c
};

}  // namespace plexus
