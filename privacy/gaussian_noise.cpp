#include "privacy/gaussian_noise.h"

#include <openssl/rand.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "core/rng.h"

namespace plexus {
namespace {

// Values per block: each block draws its own random bits (its own stream when seeded), so blocks
// run on any thread in any order with the same result.
constexpr size_t kBlock = 1 << 14;

// A uniform double in (0, 1] from 53 random bits (never 0, so the logarithm is finite).
double UnitFromBits(uint64_t bits) { return (static_cast<double>(bits >> 11) + 1.0) * 0x1.0p-53; }

// Box–Muller: two uniforms give two independent standard normals.
void AddPairs(std::span<double> values, double stddev, std::span<const uint64_t> bits) {
  for (size_t i = 0; i < values.size(); i += 2) {
    const double radius = std::sqrt(-2.0 * std::log(UnitFromBits(bits[i]))) * stddev;
    const double angle = 2.0 * M_PI * UnitFromBits(bits[i + 1]);
    values[i] += radius * std::cos(angle);
    if (i + 1 < values.size()) values[i + 1] += radius * std::sin(angle);
  }
}

// Runs fill(block_values, bits) over every block of `values`, on `pool` when given; returns false
// when a fill did.
template <typename Fill>
bool ForEachBlock(std::span<double> values, ThreadPool* pool, Fill fill) {
  const size_t blocks = (values.size() + kBlock - 1) / kBlock;
  std::atomic<bool> ok{true};
  auto run = [&](size_t begin, size_t end) {
    std::vector<uint64_t> bits(kBlock);
    for (size_t b = begin; b < end && ok.load(std::memory_order_relaxed); ++b) {
      const std::span<double> block = values.subspan(b * kBlock, std::min(kBlock, values.size() - b * kBlock));
      const std::span<uint64_t> block_bits = std::span<uint64_t>(bits).first((block.size() + 1) / 2 * 2);
      if (!fill(b, block, block_bits)) ok = false;
    }
  };
  if (pool && blocks > 1) {
    pool->ParallelFor(blocks, run, 1);
  } else {
    run(0, blocks);
  }
  return ok.load();
}

class SecureGaussianNoise final : public GaussianNoise {
 public:
  Status Add(std::span<double> values, double stddev, ThreadPool* pool) override {
    const bool ok = ForEachBlock(values, pool, [stddev](size_t, std::span<double> block, std::span<uint64_t> bits) {
      if (RAND_bytes(reinterpret_cast<unsigned char*>(bits.data()), static_cast<int>(bits.size_bytes())) != 1) {
        return false;
      }
      AddPairs(block, stddev, bits);
      return true;
    });
    if (!ok) return InternalError("OpenSSL's RAND_bytes failed: no differentially private noise, nothing released");
    return Status::Ok();
  }
  std::string Describe() const override { return "openssl"; }
};

class SeededGaussianNoise final : public GaussianNoise {
 public:
  explicit SeededGaussianNoise(uint64_t seed) : seed_(seed) {}
  Status Add(std::span<double> values, double stddev, ThreadPool* pool) override {
    const uint64_t call = calls_++;
    ForEachBlock(values, pool, [&](size_t b, std::span<double> block, std::span<uint64_t> bits) {
      Rng rng = Rng::Derive(seed_ ^ (0xd1ff3ULL + call * 0x9e3779b97f4a7c15ULL), b);
      for (uint64_t& x : bits) x = rng.NextU64();
      AddPairs(block, stddev, bits);
      return true;
    });
    return Status::Ok();
  }
  std::string Describe() const override { return "seeded(seed=" + std::to_string(seed_) + ")"; }

 private:
  const uint64_t seed_;
  uint64_t calls_ = 0;
};

}  // namespace

Status ClipAndAddNoise(std::span<float> values, double clip, double noise_multiplier, GaussianNoise& noise) {
  if (!(clip > 0) || !std::isfinite(clip)) return InvalidArgumentError("local DP: the clip must be positive");
  if (!(noise_multiplier >= 0) || !std::isfinite(noise_multiplier)) {
    return InvalidArgumentError("local DP: the noise multiplier must be at least 0");
  }
  double squared = 0;
  for (float v : values) squared += static_cast<double>(v) * v;
  const double norm = std::sqrt(squared);
  if (!std::isfinite(norm)) return InvalidArgumentError("local DP: the update holds non-finite values");
  const double scale = norm > clip ? clip / norm : 1.0;
  std::vector<double> noised(values.size());
  for (size_t i = 0; i < values.size(); ++i) noised[i] = values[i] * scale;
  if (noise_multiplier > 0) PLEXUS_RETURN_IF_ERROR(noise.Add(noised, noise_multiplier * clip));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(noised[i]);
  return Status::Ok();
}

std::unique_ptr<GaussianNoise> MakeSecureGaussianNoise() { return std::make_unique<SecureGaussianNoise>(); }
std::unique_ptr<GaussianNoise> MakeSeededGaussianNoise(uint64_t seed) {
  return std::make_unique<SeededGaussianNoise>(seed);
}

}  // namespace plexus
