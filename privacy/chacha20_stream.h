// ChaCha20Stream: the ChaCha20 keystream of a 256-bit key and a 96-bit nonce (OpenSSL), read in
// pieces. What DP's noise (gaussian_noise.h) and secure aggregation's masks (secagg_crypto.h) draw
// their bits from. One reader per stream; not thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

struct evp_cipher_ctx_st;

namespace plexus {

class ChaCha20Stream {
 public:
  // Nonce: 64 bits of `stream` then 32 of `block` (little-endian); the block counter starts at 0.
  ChaCha20Stream(const std::array<uint8_t, 32>& key, uint64_t stream, uint32_t block);
  ~ChaCha20Stream();
  ChaCha20Stream(const ChaCha20Stream&) = delete;
  ChaCha20Stream& operator=(const ChaCha20Stream&) = delete;

  // Writes the next out.size() bytes of the keystream; false (for good) when OpenSSL failed.
  bool Next(std::span<std::byte> out);

 private:
  evp_cipher_ctx_st* ctx_;
  bool ok_ = false;
};

}  // namespace plexus
