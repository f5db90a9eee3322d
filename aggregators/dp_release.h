// DpRelease: the settings every differentially private aggregate reads from its strategy spec
// (dp_fedavg, dp_ftrl): the clip C, the noise multiplier z, the fixed denominator (updates
// expected per release), the server learning rate and the simulator's noise seed. Value type.
#pragma once

#include <cstdint>
#include <optional>

#include "aggregators/strategy_spec.h"
#include "core/status.h"

namespace plexus {

struct DpRelease {
  double clip = 0;
  double noise = 0;
  double expected = 0;
  double lr = 1;
  std::optional<uint64_t> seed;  // seeded noise (simulations); none: OpenSSL's generator
};

// Reads clip, noise, expected, lr and seed from `spec`; InvalidArgument naming `strategy` and the
// key for values that mean nothing (clip ≤ 0, noise < 0 or missing, expected < 1, lr ≤ 0, a seed
// that is not a non-negative integer).
Result<DpRelease> ReadDpRelease(StrategySpec& spec, const char* strategy);

}  // namespace plexus
