// Test data for the trainers' tests: noise images and the largest difference between models.
#pragma once

#include <algorithm>
#include <cmath>

#include "compute/dataset.h"
#include "core/model_state.h"
#include "core/rng.h"

namespace plexus {

// n images of noise with labels 0..9 in turn: something to learn from, the same for both trainers.
inline Dataset NoiseData(size_t n, uint64_t seed) {
  Dataset d;
  Rng rng(seed);
  d.labels.resize(n);
  d.features.resize(n * 784);
  for (size_t i = 0; i < n; ++i) d.labels[i] = static_cast<uint8_t>(i % 10);
  for (float& p : d.features) p = static_cast<float>(rng.Normal());
  return d;
}

// The largest difference between two models of one layout.
inline double MaxDifference(const ModelState& a, const ModelState& b) {
  double worst = 0.0;
  for (size_t i = 0; i < a.data().size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(a.data()[i]) - b.data()[i]));
  }
  return worst;
}

}  // namespace plexus
