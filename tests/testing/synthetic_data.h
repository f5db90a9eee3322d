// SyntheticData: a data set of n blank 28x28 images labelled 0..9 in turn, for simulator tests
// whose stand-in trainers never look at the pixels.
#pragma once

#include <cstdint>

#include "compute/dataset.h"

namespace plexus::testing {

inline Dataset SyntheticData(size_t n) {
  Dataset d;
  d.labels.resize(n);
  for (size_t i = 0; i < n; ++i) d.labels[i] = static_cast<uint8_t>(i % 10);
  d.features.assign(n * 28 * 28, 0.0f);
  return d;
}

}  // namespace plexus::testing
