// Dataset: labelled examples held in memory as float32 features (Fashion-MNIST's normalized
// 28x28 images, or a user's CSV or safetensors data), and DatasetView, a subset of one by index
// (what a client's partition is). Views borrow the dataset, which must outlive them. Both are
// thread-compatible and read-only after loading.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/status.h"

namespace plexus {

struct Dataset {
  // The shape of one example's features, as the model takes it (without the batch dimension).
  std::vector<int64_t> example_shape{28, 28};
  std::vector<float> features;  // size() * features_per_example() values, example after example
  // Or, for data that are bytes (Fashion-MNIST's pixels), the bytes themselves and what each byte
  // value reads as: a quarter of the memory (a million-client simulation, a small device), the
  // same floats (a table filled with the float expression the loader used). `features` is then
  // empty. Readers take examples through CopyExample.
  std::vector<uint8_t> feature_bytes;
  std::array<float, 256> byte_values{};
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
  // Example k's features as float32 into out[0, features_per_example()).
  void CopyExample(size_t k, float* out) const {
    const auto per = static_cast<size_t>(features_per_example());
    if (feature_bytes.empty()) {
      std::memcpy(out, features.data() + k * per, per * sizeof(float));
      return;
    }
    const uint8_t* src = feature_bytes.data() + k * per;
    for (size_t i = 0; i < per; ++i) out[i] = byte_values[src[i]];
  }
  // Keeps the first n examples (all when n >= size()) and gives back the memory of the rest.
  void KeepFirst(size_t n) {
    if (n >= size()) return;
    const size_t values = n * static_cast<size_t>(features_per_example());
    labels.resize(n);
    labels.shrink_to_fit();
    if (feature_bytes.empty()) {
      features.resize(values);
      features.shrink_to_fit();
    } else {
      feature_bytes.resize(values);
      feature_bytes.shrink_to_fit();
    }
    targets.resize(n * static_cast<size_t>(target_width));
    targets.shrink_to_fit();
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
