#include "simulations/client_data.h"

namespace plexus {

int64_t ClientData::ExamplesPerClient(size_t data_size, int64_t clients, int64_t examples_per_client) {
  if (examples_per_client > 0) return examples_per_client;
  const auto size = static_cast<int64_t>(data_size);
  return size >= 10 * clients ? size / clients : 50;
}

Result<ClientData> ClientData::Make(const std::vector<uint8_t>& labels, const PartitionSpec& partition, int64_t clients,
                                    int64_t examples_per_client, uint64_t seed) {
  ClientData d;
  const int64_t k = examples_per_client > 0 || static_cast<int64_t>(labels.size()) < 10 * clients
                        ? ExamplesPerClient(labels.size(), clients, examples_per_client)
                        : 0;  // split
  if (k > 0) {
    PLEXUS_ASSIGN_OR_RETURN(SampledPartition s, SampledPartition::Make(labels, partition, k, seed));
    d.sampled_.emplace(std::move(s));
  } else {
    PLEXUS_ASSIGN_OR_RETURN(d.parts_, PartitionIndices(labels, partition, clients, seed));
  }
  return d;
}

}  // namespace plexus
