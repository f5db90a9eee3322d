// ClientData: where each simulated client's (or gossip node's) examples come from: a split of
// the training data (materialised once; its total size is the data's) or, for populations larger
// than the data, samples drawn on demand. Immutable after Make; thread-safe.
#pragma once

#include <optional>
#include <vector>

#include "compute/partition.h"
#include "core/status.h"

namespace plexus {

class ClientData {
 public:
  // `examples_per_client` > 0: every client samples that many with replacement; 0: split the data
  // when it gives each client at least 10 examples, else sample 50.
  static Result<ClientData> Make(const std::vector<uint8_t>& labels, const PartitionSpec& partition, int64_t clients,
                                 int64_t examples_per_client, uint64_t seed);
  // How many examples each client gets (on average, for a split) from a data set of `data_size`:
  // `examples_per_client` when positive; else an equal split when it gives each at least 10;
  // else 50 sampled. Make follows the same rule.
  static int64_t ExamplesPerClient(size_t data_size, int64_t clients, int64_t examples_per_client);
  int64_t examples(size_t i) const {
    return sampled_ ? sampled_->examples_per_client() : static_cast<int64_t>(parts_[i].size());
  }
  std::vector<uint32_t> Indices(size_t i) const { return sampled_ ? sampled_->For(i) : parts_[i]; }
  // > 0 when partitions were sampled with replacement.
  int64_t sampled_examples() const { return sampled_ ? sampled_->examples_per_client() : 0; }

 private:
  std::optional<SampledPartition> sampled_;
  std::vector<std::vector<uint32_t>> parts_;
};

}  // namespace plexus
