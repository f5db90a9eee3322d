#include "privacy/gaussian_noise.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "privacy/chacha20_stream.h"

namespace plexus {
namespace {

// Values per block: each block draws from its own ChaCha20 nonce, so blocks run on any thread in
// any order with the same result.
constexpr size_t kBlock = 1 << 14;

// The ziggurat's layers for the unnormalised density f(x) = exp(−x²/2): 256 layers of equal area
// v, the base layer's rectangle of width v/f(r) holding the tail beyond r. r and v are Marsaglia
// and Tsang's constants for 256 layers.
class ZigguratTables {
 public:
  static constexpr double kR = 3.6541528853610088;
  static constexpr double kArea = 0.00492867323399;

  ZigguratTables() {
    double x[257];
    x[0] = kArea / F(kR);
    x[1] = kR;
    for (int i = 1; i < 255; ++i) x[i + 1] = std::sqrt(-2.0 * std::log(kArea / x[i] + F(x[i])));
    x[256] = 0;
    for (int i = 0; i < 256; ++i) {
      width[i] = x[i] * 0x1.0p-53;
      const double inner = i == 0 ? kR : x[i + 1];  // below it the layer's rectangle is under f
      accept_below[i] = static_cast<uint64_t>(inner / x[i] * 0x1.0p53);
      f_outer[i] = F(x[i]);
      f_inner[i] = i == 255 ? 1.0 : F(x[i + 1]);
    }
  }
  static double F(double x) { return std::exp(-0.5 * x * x); }

  double width[256];           // layer width · 2⁻⁵³: the abscissa of 53 random bits
  uint64_t accept_below[256];  // 53-bit abscissas below this are accepted at once
  double f_outer[256];         // f at the layer's outer edge (its rectangle's bottom)
  double f_inner[256];         // f at the layer's inner edge (its top)
};

const ZigguratTables& Tables() {
  static const ZigguratTables tables;
  return tables;
}

// 64-bit words of a ChaCha20 keystream (key, nonce = stream ‖ block), drawn in small chunks.
class KeyStream {
 public:
  KeyStream(const NoiseKey& key, uint64_t stream, uint32_t block) : stream_(key, stream, block) {}

  bool ok() const { return ok_; }
  uint64_t Next() {
    if (pos_ == kWords) [[unlikely]] {
      ok_ = stream_.Next(std::as_writable_bytes(std::span<uint64_t>(words_))) && ok_;
      pos_ = 0;
    }
    return words_[pos_++];
  }
  // A uniform double in (0, 1], never 0 (its logarithm is finite).
  double Unit() { return (static_cast<double>(Next() >> 11) + 1.0) * 0x1.0p-53; }

 private:
  static constexpr int kWords = 512;
  ChaCha20Stream stream_;
  bool ok_ = true;
  int pos_ = kWords;
  uint64_t words_[kWords];
};

// x with the sign bit of `r` (bit 8) set on it: branch-free, as the sign is a coin toss that no
// branch predictor guesses.
inline double WithSign(double x, uint64_t r) {
  return std::bit_cast<double>(std::bit_cast<uint64_t>(x) | ((r & 0x100) << 55));
}

// One standard normal from the ziggurat.
inline double Normal(KeyStream& bits, const ZigguratTables& t) {
  for (;;) {
    const uint64_t r = bits.Next();
    const int layer = static_cast<int>(r & 0xff);
    const uint64_t u = r >> 11;
    double x = static_cast<double>(u) * t.width[layer];
    if (u < t.accept_below[layer]) [[likely]]
      return WithSign(x, r);
    if (layer == 0) {  // the tail beyond r (Marsaglia 1964)
      double tail, y;
      do {
        tail = -std::log(bits.Unit()) / ZigguratTables::kR;
        y = -std::log(bits.Unit());
      } while (2 * y < tail * tail);
      return WithSign(ZigguratTables::kR + tail, r);
    }
    // The wedge between the rectangle and the curve.
    const double y = t.f_outer[layer] + bits.Unit() * (t.f_inner[layer] - t.f_outer[layer]);
    if (y < ZigguratTables::F(x)) return WithSign(x, r);
  }
}

class SecureGaussianNoise final : public GaussianNoise {
 public:
  Status Add(std::span<double> values, double stddev, ThreadPool* pool) override {
    Result<NoiseKey> key = NewNoiseKey();
    if (!key.ok()) return key.status();
    return AddKeyedNormals(values, stddev, *key, 0, pool);
  }
  std::string Describe() const override { return "openssl"; }
};

class SeededGaussianNoise final : public GaussianNoise {
 public:
  explicit SeededGaussianNoise(uint64_t seed) : seed_(seed), key_(NoiseKeyFromSeed(seed, "gaussian-noise")) {}
  Status Add(std::span<double> values, double stddev, ThreadPool* pool) override {
    return AddKeyedNormals(values, stddev, key_, calls_++, pool);
  }
  std::string Describe() const override { return "seeded(seed=" + std::to_string(seed_) + ")"; }

 private:
  const uint64_t seed_;
  const NoiseKey key_;
  uint64_t calls_ = 0;
};

}  // namespace

Result<NoiseKey> NewNoiseKey() {
  NoiseKey key;
  if (RAND_bytes(key.data(), static_cast<int>(key.size())) != 1) {
    return InternalError("OpenSSL's RAND_bytes failed: no differentially private noise, nothing released");
  }
  return key;
}

NoiseKey NoiseKeyFromSeed(uint64_t seed, std::string_view purpose) {
  std::string input(8, '\0');
  for (int i = 0; i < 8; ++i) input[i] = static_cast<char>(seed >> (8 * i));
  input.append(purpose);
  NoiseKey key{};
  unsigned int len = 0;
  // SHA-256 of a few bytes cannot fail short of memory exhaustion.
  (void)EVP_Digest(input.data(), input.size(), key.data(), &len, EVP_sha256(), nullptr);
  return key;
}

Status AddKeyedNormals(std::span<double> values, double scale, const NoiseKey& key, uint64_t stream, ThreadPool* pool) {
  const ZigguratTables& tables = Tables();
  const size_t blocks = (values.size() + kBlock - 1) / kBlock;
  std::atomic<bool> ok{true};
  auto run = [&](size_t begin, size_t end) {
    for (size_t b = begin; b < end && ok.load(std::memory_order_relaxed); ++b) {
      KeyStream bits(key, stream, static_cast<uint32_t>(b));
      const size_t first = b * kBlock, last = std::min(values.size(), first + kBlock);
      for (size_t i = first; i < last; ++i) values[i] += scale * Normal(bits, tables);
      if (!bits.ok()) ok = false;
    }
  };
  if (pool && blocks > 1) {
    pool->ParallelFor(blocks, run, 1);
  } else {
    run(0, blocks);
  }
  if (!ok.load()) return InternalError("OpenSSL's ChaCha20 failed: no differentially private noise, nothing released");
  return Status::Ok();
}

Result<std::vector<double>> ClipToNormAndAddNoise(std::span<const float> values, double clip, double stddev,
                                                  GaussianNoise* noise) {
  double squared = 0;
  for (float v : values) squared += static_cast<double>(v) * v;
  const double norm = std::sqrt(squared);
  if (!std::isfinite(norm)) return InvalidArgumentError("the update holds non-finite values");
  const double scale = clip > 0 && norm > clip ? clip / norm : 1.0;
  std::vector<double> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = values[i] * scale;
  if (stddev > 0) {
    if (!noise) return InvalidArgumentError("noise asked for, and no generator given");
    PLEXUS_RETURN_IF_ERROR(noise->Add(out, stddev));
  }
  return out;
}

Status ClipAndAddNoise(std::span<float> values, double clip, double noise_multiplier, GaussianNoise& noise) {
  if (!(clip > 0) || !std::isfinite(clip)) return InvalidArgumentError("local DP: the clip must be positive");
  if (!(noise_multiplier >= 0) || !std::isfinite(noise_multiplier)) {
    return InvalidArgumentError("local DP: the noise multiplier must be at least 0");
  }
  Result<std::vector<double>> noised = ClipToNormAndAddNoise(values, clip, noise_multiplier * clip, &noise);
  if (!noised.ok()) return noised.status().WithContext("local DP");
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>((*noised)[i]);
  return Status::Ok();
}

std::unique_ptr<GaussianNoise> MakeSecureGaussianNoise() { return std::make_unique<SecureGaussianNoise>(); }
std::unique_ptr<GaussianNoise> MakeSeededGaussianNoise(uint64_t seed) {
  return std::make_unique<SeededGaussianNoise>(seed);
}

}  // namespace plexus
