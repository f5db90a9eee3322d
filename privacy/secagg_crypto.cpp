#include "privacy/secagg_crypto.h"

#include <openssl/evp.h>
#include <openssl/kdf.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "privacy/chacha20_stream.h"

namespace plexus {
namespace {

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct PkeyCtxFree {
  void operator()(EVP_PKEY_CTX* c) const { EVP_PKEY_CTX_free(c); }
};
struct CipherCtxFree {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
using PkeyCtx = std::unique_ptr<EVP_PKEY_CTX, PkeyCtxFree>;
using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, CipherCtxFree>;

Status Failed(const char* what) { return InternalError(std::string("secure aggregation: OpenSSL failed to ") + what); }

Result<X25519KeyPair> PairOf(EVP_PKEY* key) {
  X25519KeyPair pair;
  size_t len = pair.private_key.size();
  if (EVP_PKEY_get_raw_private_key(key, pair.private_key.data(), &len) != 1 || len != 32) return Failed("read a key");
  len = pair.public_key.size();
  if (EVP_PKEY_get_raw_public_key(key, pair.public_key.data(), &len) != 1 || len != 32) return Failed("read a key");
  return pair;
}

void Nonce(uint64_t n, unsigned char out[12]) {
  std::memset(out, 0, 12);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(n >> (8 * i));
}

}  // namespace

Result<X25519KeyPair> NewX25519KeyPair() {
  PkeyCtx ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_X25519, nullptr));
  EVP_PKEY* raw = nullptr;
  if (!ctx || EVP_PKEY_keygen_init(ctx.get()) != 1 || EVP_PKEY_keygen(ctx.get(), &raw) != 1) {
    return Failed("make an X25519 key");
  }
  Pkey key(raw);
  return PairOf(key.get());
}

Result<X25519KeyPair> X25519FromPrivate(const Secret32& private_key) {
  Pkey key(EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, nullptr, private_key.data(), private_key.size()));
  if (!key) return InvalidArgumentError("secure aggregation: not an X25519 private key");
  return PairOf(key.get());
}

Result<Secret32> AgreeKey(const Secret32& mine, const PublicKey32& theirs, std::string_view purpose) {
  Pkey own(EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, nullptr, mine.data(), mine.size()));
  Pkey peer(EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, nullptr, theirs.data(), theirs.size()));
  if (!own || !peer) return InvalidArgumentError("secure aggregation: not an X25519 key");
  PkeyCtx ctx(EVP_PKEY_CTX_new(own.get(), nullptr));
  Secret32 shared;
  size_t len = shared.size();
  if (!ctx || EVP_PKEY_derive_init(ctx.get()) != 1 || EVP_PKEY_derive_set_peer(ctx.get(), peer.get()) != 1 ||
      EVP_PKEY_derive(ctx.get(), shared.data(), &len) != 1 || len != shared.size()) {
    // OpenSSL refuses a peer key of small order (the all-zero shared secret).
    return InvalidArgumentError("secure aggregation: key agreement with this public key failed");
  }
  PkeyCtx kdf(EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr));
  Secret32 key;
  len = key.size();
  if (!kdf || EVP_PKEY_derive_init(kdf.get()) != 1 || EVP_PKEY_CTX_set_hkdf_md(kdf.get(), EVP_sha256()) != 1 ||
      EVP_PKEY_CTX_set1_hkdf_key(kdf.get(), shared.data(), static_cast<int>(shared.size())) != 1 ||
      EVP_PKEY_CTX_add1_hkdf_info(kdf.get(), reinterpret_cast<const unsigned char*>(purpose.data()),
                                  static_cast<int>(purpose.size())) != 1 ||
      EVP_PKEY_derive(kdf.get(), key.data(), &len) != 1) {
    return Failed("derive a key (HKDF)");
  }
  std::fill(shared.begin(), shared.end(), 0);
  return key;
}

Result<std::vector<uint8_t>> Seal(const Secret32& key, uint64_t nonce, std::span<const uint8_t> aad,
                                  std::span<const uint8_t> plaintext) {
  CipherCtx ctx(EVP_CIPHER_CTX_new());
  unsigned char iv[12];
  Nonce(nonce, iv);
  std::vector<uint8_t> out(plaintext.size() + 16);
  int len = 0;
  if (!ctx || EVP_EncryptInit_ex(ctx.get(), EVP_chacha20_poly1305(), nullptr, key.data(), iv) != 1 ||
      EVP_EncryptUpdate(ctx.get(), nullptr, &len, aad.data(), static_cast<int>(aad.size())) != 1 ||
      EVP_EncryptUpdate(ctx.get(), out.data(), &len, plaintext.data(), static_cast<int>(plaintext.size())) != 1 ||
      EVP_EncryptFinal_ex(ctx.get(), out.data() + len, &len) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_AEAD_GET_TAG, 16, out.data() + plaintext.size()) != 1) {
    return Failed("seal a message");
  }
  return out;
}

Result<std::vector<uint8_t>> Open(const Secret32& key, uint64_t nonce, std::span<const uint8_t> aad,
                                  std::span<const uint8_t> sealed) {
  if (sealed.size() < 16) return InvalidArgumentError("secure aggregation: a sealed message shorter than its tag");
  CipherCtx ctx(EVP_CIPHER_CTX_new());
  unsigned char iv[12];
  Nonce(nonce, iv);
  const size_t n = sealed.size() - 16;
  std::vector<uint8_t> out(n);
  std::array<uint8_t, 16> tag;
  std::copy(sealed.end() - 16, sealed.end(), tag.begin());
  int len = 0;
  if (!ctx || EVP_DecryptInit_ex(ctx.get(), EVP_chacha20_poly1305(), nullptr, key.data(), iv) != 1 ||
      EVP_DecryptUpdate(ctx.get(), nullptr, &len, aad.data(), static_cast<int>(aad.size())) != 1 ||
      EVP_DecryptUpdate(ctx.get(), out.data(), &len, sealed.data(), static_cast<int>(n)) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_AEAD_SET_TAG, 16, tag.data()) != 1) {
    return Failed("open a message");
  }
  if (EVP_DecryptFinal_ex(ctx.get(), out.data() + len, &len) != 1) {
    return InvalidArgumentError("secure aggregation: a sealed message does not open (altered, or not for this key)");
  }
  return out;
}

Status AddMask(std::span<uint32_t> out, const Secret32& seed, int sign) {
  ChaCha20Stream stream(seed, 0, 0);
  constexpr size_t kChunk = 2048;
  uint32_t words[kChunk];
  for (size_t at = 0; at < out.size(); at += kChunk) {
    const size_t n = std::min(kChunk, out.size() - at);
    if (!stream.Next(std::as_writable_bytes(std::span<uint32_t>(words, n)))) return Failed("expand a mask");
    uint32_t* o = out.data() + at;
    if (sign > 0) {
      for (size_t i = 0; i < n; ++i) o[i] += words[i];
    } else {
      for (size_t i = 0; i < n; ++i) o[i] -= words[i];
    }
  }
  return Status::Ok();
}

}  // namespace plexus
