// RandomRound: a base model of one tensor and n client updates of ordinary floats around it (no
// exact sums in float arithmetic), each with a random example count: the inputs of tests that
// compare aggregations of the same updates (exact sums, partial sums, orders, trees).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/model_state.h"
#include "core/rng.h"
#include "core/update.h"

namespace plexus::testing {

struct RandomRound {
  ModelState base;
  std::vector<Update> updates;  // client ids c0, c1, ...; 1..600 examples
};

// Deltas drawn from N(0, delta_sd²); the same round for the same arguments.
inline RandomRound MakeRandomRound(size_t n, size_t dims, uint64_t seed = 7, double delta_sd = 0.01) {
  Rng rng(seed);
  RandomRound r{*ModelState::Create({{"w", {static_cast<int64_t>(dims)}}}), {}};
  for (float& v : r.base.data()) v = static_cast<float>(rng.Normal());
  for (size_t i = 0; i < n; ++i) {
    Update u;
    u.client_id = "c" + std::to_string(i);
    u.num_examples = 1 + static_cast<int64_t>(rng.Below(600));
    u.delta = ModelState::ZerosLike(r.base);
    for (float& v : u.delta.data()) v = static_cast<float>(rng.Normal() * delta_sd);
    r.updates.push_back(std::move(u));
  }
  return r;
}

}  // namespace plexus::testing
