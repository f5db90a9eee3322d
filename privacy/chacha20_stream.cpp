#include "privacy/chacha20_stream.h"

#include <openssl/evp.h>

#include <cstring>

namespace plexus {

ChaCha20Stream::ChaCha20Stream(const std::array<uint8_t, 32>& key, uint64_t stream, uint32_t block)
    : ctx_(EVP_CIPHER_CTX_new()) {
  unsigned char iv[16] = {};  // OpenSSL's ChaCha20 IV: 32-bit little-endian counter, 96-bit nonce
  for (int i = 0; i < 8; ++i) iv[4 + i] = static_cast<unsigned char>(stream >> (8 * i));
  for (int i = 0; i < 4; ++i) iv[12 + i] = static_cast<unsigned char>(block >> (8 * i));
  ok_ = ctx_ && EVP_EncryptInit_ex(ctx_, EVP_chacha20(), nullptr, key.data(), iv) == 1;
}

ChaCha20Stream::~ChaCha20Stream() { EVP_CIPHER_CTX_free(ctx_); }

bool ChaCha20Stream::Next(std::span<std::byte> out) {
  auto* bytes = reinterpret_cast<unsigned char*>(out.data());
  std::memset(bytes, 0, out.size());  // the keystream is the encryption of zeros
  int len = 0;
  if (!ok_ || EVP_EncryptUpdate(ctx_, bytes, &len, bytes, static_cast<int>(out.size())) != 1 ||
      len != static_cast<int>(out.size())) {
    ok_ = false;
  }
  return ok_;
}

}  // namespace plexus
