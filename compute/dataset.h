// Dataset: labelled 28x28 grayscale images held in memory as normalized float32, and
// DatasetView, a subset of one by index (what a client's partition is). Views borrow the
// dataset, which must outlive them. Both are thread-compatible and read-only after loading.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace plexus {

struct Dataset {
  int64_t rows = 28;
  int64_t cols = 28;
  std::vector<float> pixels;    // size() * rows * cols values, normalized
  std::vector<uint8_t> labels;  // in [0, 10)

  size_t size() const { return labels.size(); }
  int64_t pixels_per_image() const { return rows * cols; }
};

struct DatasetView {
  const Dataset* data = nullptr;
  std::vector<uint32_t> indices;
  // When set, example k's label reads as label_map[labels[k]] (simulated label-flipping attackers).
  const uint8_t* label_map = nullptr;

  static DatasetView All(const Dataset& d);
  // The first min(n, size) examples; n == 0 means all.
  static DatasetView Prefix(const Dataset& d, size_t n);
  size_t size() const { return indices.size(); }
};

}  // namespace plexus
