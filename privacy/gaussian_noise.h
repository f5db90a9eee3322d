// GaussianNoise: where differential privacy's noise comes from. A server draws it from OpenSSL's
// cryptographically secure generator (RAND_bytes keys a fresh ChaCha20 stream for every call), so
// that nobody who learns a seed or a few outputs can predict and subtract it; the simulator
// draws it from a seeded stream so that its runs stay reproducible, which makes a simulation's
// "private" model private only against those who do not know the seed (it says so in its
// summary). Keyed streams (AddKeyedNormals) give the same noise again for the same key and stream
// id: DP-FTRL's tree nodes are added once and taken back later without being stored.
//
// Normals come from a 256-layer ziggurat (Marsaglia and Tsang 2000) over 64 random bits each:
// 8 for the layer, 1 for the sign, 53 for the abscissa, so about 99% of draws cost one multiply
// and one comparison (Box–Muller's logarithm and sine cost several times the aggregation they
// protect). Known limit: a floating-point Gaussian is not exactly Gaussian in its lowest bits
// (Mironov 2012 showed how such gaps leak for the Laplace mechanism); docs/privacy.md names it
// among what is not protected. Thread-compatible: one source per aggregation (Add itself may fan
// out over a pool).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"

namespace plexus {

class GaussianNoise {
 public:
  virtual ~GaussianNoise() = default;
  // values[i] += N(0, stddev²) for every i, independently, on `pool` when given (the values are
  // drawn in fixed blocks, so a seeded source gives the same numbers however many threads).
  // Internal when the secure generator fails: `values` may then be partly noised and must be
  // discarded (nothing is released without its noise). REQUIRES: stddev ≥ 0 and finite.
  virtual Status Add(std::span<double> values, double stddev, ThreadPool* pool = nullptr) = 0;
  // "openssl" or "seeded(seed=N)", for summaries and logs.
  virtual std::string Describe() const = 0;
};

// The Gaussian mechanism on one vector (local DP on a client, before its update leaves it):
// scales `values` to L2 norm at most `clip`, then adds N(0, (noise_multiplier·clip)²) to each.
// InvalidArgument for a clip that is not positive, a negative noise multiplier or non-finite
// values (nothing changed then); the noise source's error otherwise (values must be discarded).
Status ClipAndAddNoise(std::span<float> values, double clip, double noise_multiplier, GaussianNoise& noise);

// What both local DP and secure aggregation's members (distributed DP) do to a delta: `values`
// scaled to L2 norm at most `clip` (0: not scaled), then N(0, stddev²) added to each (0: none),
// in double precision. InvalidArgument for non-finite values, or for noise asked of a null `noise`;
// the noise source's error otherwise.
Result<std::vector<double>> ClipToNormAndAddNoise(std::span<const float> values, double clip, double stddev,
                                                  GaussianNoise* noise);

// Draws from ChaCha20 streams keyed by OpenSSL's RAND_bytes, a fresh key per call.
std::unique_ptr<GaussianNoise> MakeSecureGaussianNoise();
// Draws from ChaCha20 streams keyed by the seed: the same numbers for the same seed and call
// sequence, on every machine.
std::unique_ptr<GaussianNoise> MakeSeededGaussianNoise(uint64_t seed);

// A 256-bit secret that keys reproducible noise streams.
using NoiseKey = std::array<uint8_t, 32>;
// A fresh key from OpenSSL's RAND_bytes; Internal when the generator fails.
Result<NoiseKey> NewNoiseKey();
// The key of a seed (SHA-256 of it and `purpose`): for simulations, whose noise is reproducible.
NoiseKey NoiseKeyFromSeed(uint64_t seed, std::string_view purpose);

// values[i] += scale · n_i, where n is stream `stream` of standard normals under `key`: every call
// with the same key and stream adds the same n (in fixed blocks, whatever the pool), so a call
// with −scale takes back exactly what +scale added (up to rounding). Internal when OpenSSL's
// cipher fails (values partly changed, to be discarded). REQUIRES: scale finite.
Status AddKeyedNormals(std::span<double> values, double scale, const NoiseKey& key, uint64_t stream,
                       ThreadPool* pool = nullptr);

}  // namespace plexus
