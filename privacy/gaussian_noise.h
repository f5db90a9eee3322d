// GaussianNoise: where differential privacy's noise comes from. A server draws it from OpenSSL's
// cryptographically secure generator (RAND_bytes), so that nobody who learns a seed or a few
// outputs can predict and subtract it; the simulator draws it from a seeded stream so that its
// runs stay reproducible, which makes a simulation's "private" model private only against those
// who do not know the seed (it says so in its summary).
//
// Normals come from Box–Muller over 53-bit uniforms in double precision. Known limit: a
// floating-point Gaussian is not exactly Gaussian in its lowest bits (Mironov 2012 showed how
// such gaps leak for the Laplace mechanism); docs/privacy.md names it among what is not protected.
// Thread-compatible: one source per aggregation (Add itself may fan out over a pool).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

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

// Draws from OpenSSL's RAND_bytes.
std::unique_ptr<GaussianNoise> MakeSecureGaussianNoise();
// Draws from seeded streams (core/rng.h), one per block of values and per call: the same numbers
// for the same seed and call sequence, on every machine.
std::unique_ptr<GaussianNoise> MakeSeededGaussianNoise(uint64_t seed);

}  // namespace plexus
