// VectorModel: a one-tensor model ("w") holding the given values, for hand-checked test cases.
#pragma once

#include <algorithm>
#include <vector>

#include "core/model_state.h"

namespace plexus::testing {

inline ModelState VectorModel(const std::vector<float>& values) {
  ModelState m = *ModelState::Create({{"w", {static_cast<int64_t>(values.size())}}});
  std::copy(values.begin(), values.end(), m.data().begin());
  return m;
}

}  // namespace plexus::testing
