// Evaluation: how well a model does on a data set. Value type.
#pragma once

#include <cstdint>

namespace plexus {

struct Evaluation {
  double accuracy = 0.0;  // fraction in [0, 1]
  double loss = 0.0;      // mean cross-entropy
  int64_t examples = 0;
};

}  // namespace plexus
