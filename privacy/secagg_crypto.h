// The primitives secure aggregation is built from, over OpenSSL: X25519 key pairs and agreement,
// HKDF-SHA256 to turn an agreed secret into a key for one purpose, ChaCha20-Poly1305 to seal a
// message to one peer, and ChaCha20 to expand a 32-byte seed into a mask. Pure functions;
// thread-safe. Errors are Internal (OpenSSL failed) or InvalidArgument (a bad key or a message
// that does not open).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "privacy/shamir.h"

namespace plexus {

using PublicKey32 = std::array<uint8_t, 32>;

struct X25519KeyPair {
  Secret32 private_key{};
  PublicKey32 public_key{};
};

// A fresh key pair from OpenSSL's generator.
Result<X25519KeyPair> NewX25519KeyPair();
// The pair of a private key (a recovered one).
Result<X25519KeyPair> X25519FromPrivate(const Secret32& private_key);
// HKDF-SHA256(X25519(mine, theirs), info = `purpose`): the same key on both sides, different for
// every purpose. InvalidArgument for a public key that gives the all-zero secret.
Result<Secret32> AgreeKey(const Secret32& mine, const PublicKey32& theirs, std::string_view purpose);

// ChaCha20-Poly1305 under `key` with a 12-byte nonce from `nonce` (each key seals one message per
// nonce), `aad` authenticated but not sealed: ciphertext ‖ 16-byte tag.
Result<std::vector<uint8_t>> Seal(const Secret32& key, uint64_t nonce, std::span<const uint8_t> aad,
                                  std::span<const uint8_t> plaintext);
// The plaintext, or InvalidArgument when the tag does not match (altered, or another key/aad).
Result<std::vector<uint8_t>> Open(const Secret32& key, uint64_t nonce, std::span<const uint8_t> aad,
                                  std::span<const uint8_t> sealed);

// out[i] += sign · w_i mod 2^32 for the ChaCha20 keystream words w of `seed` (sign ±1): a mask
// and, with the other sign, its removal.
Status AddMask(std::span<uint32_t> out, const Secret32& seed, int sign);

}  // namespace plexus
