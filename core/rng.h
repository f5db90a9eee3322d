// Rng: a seeded pseudo-random generator (xoshiro256**, seeded through splitmix64) with its own
// distributions, so the same seed gives the same numbers on every compiler and platform
// (std:: distributions are implementation-defined). Thread-compatible: one Rng per thread.
#pragma once

#include <cstdint>
#include <span>
#include <utility>

namespace plexus {

class Rng {
 public:
  explicit Rng(uint64_t seed);
  // A generator for a sub-stream, e.g. Rng(seed).Fork(round): independent of call order.
  static Rng Derive(uint64_t seed, uint64_t stream);

  uint64_t NextU64();
  // Uniform in [0, 1).
  double Uniform();
  // Uniform integer in [0, n). REQUIRES: n > 0.
  uint64_t Below(uint64_t n);
  // Standard normal.
  double Normal();
  // Gamma(shape, 1). REQUIRES: shape > 0.
  double Gamma(double shape);

  template <typename T>
  void Shuffle(std::span<T> items) {
    for (size_t i = items.size(); i > 1; --i) {
      size_t j = static_cast<size_t>(Below(i));
      std::swap(items[i - 1], items[j]);
    }
  }

 private:
  uint64_t s_[4];
};

}  // namespace plexus
