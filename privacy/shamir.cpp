#include "privacy/shamir.h"

#include <openssl/bn.h>

#include <memory>
#include <set>

namespace plexus {
namespace {

struct BnFree {
  void operator()(BIGNUM* b) const { BN_clear_free(b); }
};
struct CtxFree {
  void operator()(BN_CTX* c) const { BN_CTX_free(c); }
};
using Bn = std::unique_ptr<BIGNUM, BnFree>;
using Ctx = std::unique_ptr<BN_CTX, CtxFree>;

Bn NewBn() { return Bn(BN_new()); }

// p = 2^521 − 1, a Mersenne prime.
const BIGNUM* Prime() {
  static BIGNUM* p = [] {
    BIGNUM* v = BN_new();
    BN_set_bit(v, 521);
    BN_sub_word(v, 1);
    return v;
  }();
  return p;
}

Status CheckPoints(std::span<const uint32_t> xs) {
  std::set<uint32_t> seen;
  for (uint32_t x : xs) {
    if (x == 0) return InvalidArgumentError("Shamir: a share at point 0 would be the secret itself");
    if (!seen.insert(x).second) return InvalidArgumentError("Shamir: two shares at point " + std::to_string(x));
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<ShamirShare>> ShamirSplit(const Secret32& secret, int threshold, std::span<const uint32_t> xs) {
  if (threshold < 1 || static_cast<size_t>(threshold) > xs.size()) {
    return InvalidArgumentError("Shamir: the threshold must be between 1 and the number of shares");
  }
  PLEXUS_RETURN_IF_ERROR(CheckPoints(xs));
  const Status failed = InternalError("Shamir: OpenSSL's big-number arithmetic failed");
  Ctx ctx(BN_CTX_new());
  std::vector<Bn> coefficients;
  coefficients.push_back(Bn(BN_bin2bn(secret.data(), static_cast<int>(secret.size()), nullptr)));
  for (int i = 1; i < threshold; ++i) {
    coefficients.push_back(NewBn());
    if (!coefficients.back() || BN_priv_rand_range(coefficients.back().get(), Prime()) != 1) return failed;
  }
  if (!ctx || !coefficients.front()) return failed;
  std::vector<ShamirShare> shares;
  Bn x = NewBn(), y = NewBn();
  for (uint32_t point : xs) {
    // Horner: y = (((a_{t−1}·x + a_{t−2})·x + …)·x + a_0) mod p.
    if (!x || !y || BN_set_word(x.get(), point) != 1 || !BN_copy(y.get(), coefficients.back().get())) return failed;
    for (int i = threshold - 2; i >= 0; --i) {
      if (BN_mod_mul(y.get(), y.get(), x.get(), Prime(), ctx.get()) != 1 ||
          BN_mod_add(y.get(), y.get(), coefficients[static_cast<size_t>(i)].get(), Prime(), ctx.get()) != 1) {
        return failed;
      }
    }
    ShamirShare share{point, std::vector<uint8_t>(kShamirShareBytes)};
    if (BN_bn2binpad(y.get(), share.y.data(), static_cast<int>(kShamirShareBytes)) < 0) return failed;
    shares.push_back(std::move(share));
  }
  return shares;
}

Result<Secret32> ShamirRecover(std::span<const ShamirShare> shares, int threshold) {
  if (threshold < 1 || shares.size() < static_cast<size_t>(threshold)) {
    return InvalidArgumentError("Shamir: " + std::to_string(shares.size()) + " shares, " + std::to_string(threshold) +
                                " needed");
  }
  const auto used = shares.first(static_cast<size_t>(threshold));
  std::vector<uint32_t> xs;
  for (const ShamirShare& s : used) xs.push_back(s.x);
  PLEXUS_RETURN_IF_ERROR(CheckPoints(xs));
  const Status failed = InternalError("Shamir: OpenSSL's big-number arithmetic failed");
  Ctx ctx(BN_CTX_new());
  Bn secret = NewBn(), term = NewBn(), num = NewBn(), den = NewBn(), diff = NewBn(), y = NewBn();
  if (!ctx || !secret || !term || !num || !den || !diff || !y) return failed;
  BN_zero(secret.get());
  for (size_t i = 0; i < used.size(); ++i) {
    if (used[i].y.size() != kShamirShareBytes) return InvalidArgumentError("Shamir: a share of the wrong length");
    if (!BN_bin2bn(used[i].y.data(), static_cast<int>(kShamirShareBytes), y.get())) return failed;
    if (BN_cmp(y.get(), Prime()) >= 0) return InvalidArgumentError("Shamir: a share outside the field");
    // Lagrange basis at 0: Π_{j≠i} x_j / (x_j − x_i).
    BN_one(num.get());
    BN_one(den.get());
    for (size_t j = 0; j < used.size(); ++j) {
      if (j == i) continue;
      if (BN_set_word(term.get(), used[j].x) != 1 ||
          BN_mod_mul(num.get(), num.get(), term.get(), Prime(), ctx.get()) != 1)
        return failed;
      if (BN_set_word(diff.get(), used[i].x) != 1 ||
          BN_mod_sub(diff.get(), term.get(), diff.get(), Prime(), ctx.get()) != 1 ||
          BN_mod_mul(den.get(), den.get(), diff.get(), Prime(), ctx.get()) != 1) {
        return failed;
      }
    }
    if (!BN_mod_inverse(den.get(), den.get(), Prime(), ctx.get()) ||
        BN_mod_mul(term.get(), num.get(), den.get(), Prime(), ctx.get()) != 1 ||
        BN_mod_mul(term.get(), term.get(), y.get(), Prime(), ctx.get()) != 1 ||
        BN_mod_add(secret.get(), secret.get(), term.get(), Prime(), ctx.get()) != 1) {
      return failed;
    }
  }
  if (BN_num_bytes(secret.get()) > 32) return InvalidArgumentError("Shamir: the shares are not of one 32-byte secret");
  Secret32 out;
  if (BN_bn2binpad(secret.get(), out.data(), static_cast<int>(out.size())) < 0) return failed;
  return out;
}

}  // namespace plexus
