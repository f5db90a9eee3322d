// Dataset: labelled examples held in memory as float32 features (Fashion-MNIST's normalized
// 28x28 images, or a user's CSV or safetensors data), and DatasetView, a subset of one by index
// (what a client's partition is). Views borrow the dataset, which must outlive them. Both are
// thread-compatible and read-only after loading.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace plexus {

struct Dataset {
  // The shape of one example's features, as the model takes it (without the batch dimension).
  std::vector<int64_t> example_shape{28, 28};
  std::vector<float> features;  // size() * features_per_example() values, example after example
  std::vector<uint8_t> labels;  // class indices in [0, num_classes); all 0 for regression
  int64_t num_classes = 10;
  // Regression (--loss mse): target_width values per example, example after example; 0 for
  // classification.
  std::vector<float> targets;
  int64_t target_width = 0;

  size_t size() const { return labels.size(); }
  int64_t features_per_example() const {
    int64_t n = 1;
    for (int64_t d : example_shape) n *= d;
    return n;
  }
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
