#include "simulations/client_data.h"

namespace plexus {

Result<ClientData> ClientData::Make(const std::vector<uint8_t>& labels, const PartitionSpec& partition, int64_t clients,
                                    int64_t examples_per_client, uint64_t seed) {
  ClientData d;
  int64_t k = examples_per_client;
  if (k == 0 && static_cast<int64_t>(labels.size()) < 10 * clients) k = 50;
  if (k > 0) {
    PLEXUS_ASSIGN_OR_RETURN(SampledPartition s, SampledPartition::Make(labels, partition, k, seed));
    d.sampled_.emplace(std::move(s));
  } else {
    PLEXUS_ASSIGN_OR_RETURN(d.parts_, PartitionIndices(labels, partition, clients, seed));
  }
  return d;
}

}  // namespace plexus
