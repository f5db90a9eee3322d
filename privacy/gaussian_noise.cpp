#include "privacy/gaussian_noise.h"

#include <openssl/rand.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/rng.h"

namespace plexus {
namespace {

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

class SecureGaussianNoise final : public GaussianNoise {
 public:
  Status Add(std::span<double> values, double stddev) override {
    constexpr size_t kChunk = 1 << 14;  // values per draw from the generator (even)
    std::vector<uint64_t> bits(kChunk);
    // Draw all the noise before adding any, so a generator failure leaves `values` unchanged.
    std::vector<double> all(values.size(), 0.0);
    for (size_t at = 0; at < values.size(); at += kChunk) {
      const size_t n = std::min(kChunk, values.size() - at);
      const size_t pairs = (n + 1) / 2 * 2;
      if (RAND_bytes(reinterpret_cast<unsigned char*>(bits.data()), static_cast<int>(pairs * sizeof(uint64_t))) != 1) {
        return InternalError("OpenSSL's RAND_bytes failed: no differentially private noise, nothing released");
      }
      AddPairs(std::span<double>(all).subspan(at, n), stddev, std::span<const uint64_t>(bits).first(pairs));
    }
    for (size_t i = 0; i < values.size(); ++i) values[i] += all[i];
    return Status::Ok();
  }
  std::string Describe() const override { return "openssl"; }
};

class SeededGaussianNoise final : public GaussianNoise {
 public:
  explicit SeededGaussianNoise(uint64_t seed) : seed_(seed), rng_(Rng::Derive(seed, 0xd1ff3)) {}
  Status Add(std::span<double> values, double stddev) override {
    std::vector<uint64_t> bits((values.size() + 1) / 2 * 2);
    for (uint64_t& b : bits) b = rng_.NextU64();
    AddPairs(values, stddev, bits);
    return Status::Ok();
  }
  std::string Describe() const override { return "seeded(seed=" + std::to_string(seed_) + ")"; }

 private:
  const uint64_t seed_;
  Rng rng_;
};

}  // namespace

std::unique_ptr<GaussianNoise> MakeSecureGaussianNoise() { return std::make_unique<SecureGaussianNoise>(); }
std::unique_ptr<GaussianNoise> MakeSeededGaussianNoise(uint64_t seed) {
  return std::make_unique<SeededGaussianNoise>(seed);
}

}  // namespace plexus
