// libFuzzer target: partition specs (`--partition`) and the partitioners they drive. The first
// byte picks the number of clients; the rest is the spec text.
#include <cstdint>
#include <string_view>
#include <vector>

#include "compute/partition.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int64_t clients = 1 + data[0] % 64;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  plexus::Result<plexus::PartitionSpec> spec = plexus::PartitionSpec::Parse(text);
  if (!spec.ok()) return 0;
  std::vector<uint8_t> labels(500);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<uint8_t>(i % 10);
  (void)plexus::PartitionIndices(labels, *spec, clients, 1);
  if (auto sampled = plexus::SampledPartition::Make(labels, *spec, clients, 1); sampled.ok()) {
    (void)sampled->For(static_cast<uint64_t>(clients) * 7919);
  }
  return 0;
}
