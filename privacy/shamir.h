// Shamir secret sharing of 32-byte secrets (secure aggregation's mask keys and self-mask seeds):
// a secret is the constant term of a random polynomial of degree t − 1 over the prime field of
// p = 2^521 − 1 (larger than any 32-byte secret), and share x is the polynomial's value at x.
// Any t shares give the secret back by Lagrange interpolation at 0; fewer say nothing about it
// (every secret is equally likely given t − 1 shares). Coefficients come from OpenSSL's
// RAND_bytes. Pure functions; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace plexus {

using Secret32 = std::array<uint8_t, 32>;

struct ShamirShare {
  uint32_t x = 0;          // the evaluation point: 1, 2, … (never 0, where the secret is)
  std::vector<uint8_t> y;  // the polynomial's value there, big-endian, kShamirShareBytes long
};

inline constexpr size_t kShamirShareBytes = 66;  // ⌈521 / 8⌉

// Shares of `secret` at points xs (distinct, non-zero), any `threshold` of which recover it.
// InvalidArgument for threshold < 1, more than xs.size(), or points that are zero or repeat;
// Internal when OpenSSL fails.
Result<std::vector<ShamirShare>> ShamirSplit(const Secret32& secret, int threshold, std::span<const uint32_t> xs);

// The secret from at least `threshold` shares of it (the first `threshold` are used).
// InvalidArgument for too few shares, repeated or zero points, a share of the wrong length or
// out of the field, or a result that is not a 32-byte secret (shares of different secrets).
Result<Secret32> ShamirRecover(std::span<const ShamirShare> shares, int threshold);

}  // namespace plexus
