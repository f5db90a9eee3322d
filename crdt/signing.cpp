#include "crdt/signing.h"

#include <openssl/evp.h>

#include <memory>

namespace plexus {
namespace {

using PkeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using MdCtxPtr = std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)>;

const unsigned char* Bytes(std::string_view s) { return reinterpret_cast<const unsigned char*>(s.data()); }

Result<std::string> PublicKeyOf(EVP_PKEY* key) {
  std::string out(32, '\0');
  size_t len = out.size();
  if (EVP_PKEY_get_raw_public_key(key, reinterpret_cast<unsigned char*>(out.data()), &len) != 1 || len != 32) {
    return InternalError("Ed25519: cannot read the public key");
  }
  return out;
}

}  // namespace

Result<SigningKey> SigningKey::FromSeed(std::string_view seed) {
  if (seed.size() != 32) return InvalidArgumentError("Ed25519 seed must be 32 bytes");
  PkeyPtr key(EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, Bytes(seed), seed.size()), &EVP_PKEY_free);
  if (!key) return InternalError("Ed25519: cannot load the private key");
  SigningKey k;
  k.seed_ = std::string(seed);
  PLEXUS_ASSIGN_OR_RETURN(k.public_key_, PublicKeyOf(key.get()));
  return k;
}

Result<SigningKey> SigningKey::Generate() {
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nullptr);
  EVP_PKEY* raw = nullptr;
  const bool ok = ctx && EVP_PKEY_keygen_init(ctx) == 1 && EVP_PKEY_keygen(ctx, &raw) == 1;
  EVP_PKEY_CTX_free(ctx);
  PkeyPtr key(raw, &EVP_PKEY_free);
  if (!ok) return InternalError("Ed25519: key generation failed");
  std::string seed(32, '\0');
  size_t len = seed.size();
  if (EVP_PKEY_get_raw_private_key(key.get(), reinterpret_cast<unsigned char*>(seed.data()), &len) != 1) {
    return InternalError("Ed25519: cannot read the private key");
  }
  return FromSeed(seed);
}

Result<std::string> SigningKey::Sign(std::string_view message) const {
  PkeyPtr key(EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, Bytes(seed_), seed_.size()), &EVP_PKEY_free);
  MdCtxPtr md(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  std::string sig(64, '\0');
  size_t len = sig.size();
  if (!key || !md || EVP_DigestSignInit(md.get(), nullptr, nullptr, nullptr, key.get()) != 1 ||
      EVP_DigestSign(md.get(), reinterpret_cast<unsigned char*>(sig.data()), &len, Bytes(message), message.size()) !=
          1) {
    return InternalError("Ed25519: signing failed");
  }
  return sig;
}

Status VerifySignature(std::string_view public_key, std::string_view message, std::string_view signature) {
  if (public_key.size() != 32) return InvalidArgumentError("Ed25519 public key must be 32 bytes");
  PkeyPtr key(EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nullptr, Bytes(public_key), public_key.size()),
              &EVP_PKEY_free);
  MdCtxPtr md(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (!key || !md) return InvalidArgumentError("Ed25519: malformed public key");
  if (EVP_DigestVerifyInit(md.get(), nullptr, nullptr, nullptr, key.get()) != 1 ||
      EVP_DigestVerify(md.get(), Bytes(signature), signature.size(), Bytes(message), message.size()) != 1) {
    return PermissionDeniedError("signature does not verify");
  }
  return Status::Ok();
}

}  // namespace plexus
