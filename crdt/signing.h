// Ed25519 signatures (OpenSSL) for CRDT contributions: a SigningKey signs, anyone holding the
// 32-byte public key verifies. Keys and signatures travel as raw bytes in std::string.
// SigningKey is a value (copyable); every function is thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace plexus {

class SigningKey {
 public:
  // A fresh random key (OpenSSL's generator).
  static Result<SigningKey> Generate();
  // The key whose 32-byte private seed is `seed` (tests and reproducible simulations).
  static Result<SigningKey> FromSeed(std::string_view seed);

  const std::string& public_key() const { return public_key_; }
  // The 64-byte signature of `message`.
  Result<std::string> Sign(std::string_view message) const;

 private:
  std::string seed_;        // 32 bytes
  std::string public_key_;  // 32 bytes
};

// OK when `signature` is `public_key`'s signature of `message`; PermissionDenied otherwise,
// InvalidArgument for a malformed key.
Status VerifySignature(std::string_view public_key, std::string_view message, std::string_view signature);

}  // namespace plexus
