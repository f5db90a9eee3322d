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
  const size_t t = used.size();
  // Lagrange at 0: secret = Σ y_i·num_i/den_i, num_i = Π_{j≠i} x_j, den_i = Π_{j≠i} (x_j − x_i).
  // One inversion for all the den_i (of their product; each 1/den_i is that inverse times the
  // other den_k, from prefix and suffix products): inversions cost far more than products.
  std::vector<Bn> num, den, y;
  Bn term = NewBn(), diff = NewBn();
  if (!ctx || !term || !diff) return failed;
  for (size_t i = 0; i < t; ++i) {
    if (used[i].y.size() != kShamirShareBytes) return InvalidArgumentError("Shamir: a share of the wrong length");
    num.push_back(NewBn());
    den.push_back(NewBn());
    y.push_back(Bn(BN_bin2bn(used[i].y.data(), static_cast<int>(kShamirShareBytes), nullptr)));
    if (!num.back() || !den.back() || !y.back()) return failed;
    if (BN_cmp(y.back().get(), Prime()) >= 0) return InvalidArgumentError("Shamir: a share outside the field");
    BN_one(num[i].get());
    BN_one(den[i].get());
    for (size_t j = 0; j < t; ++j) {
      if (j == i) continue;
      if (BN_set_word(term.get(), used[j].x) != 1 ||
          BN_mod_mul(num[i].get(), num[i].get(), term.get(), Prime(), ctx.get()) != 1 ||
          BN_set_word(diff.get(), used[i].x) != 1 ||
          BN_mod_sub(diff.get(), term.get(), diff.get(), Prime(), ctx.get()) != 1 ||
          BN_mod_mul(den[i].get(), den[i].get(), diff.get(), Prime(), ctx.get()) != 1) {
        return failed;
      }
    }
  }
  std::vector<Bn> prefix;  // prefix[i] = Π_{k<i} den_k
  prefix.push_back(NewBn());
  if (!prefix.back()) return failed;
  BN_one(prefix.back().get());
  for (size_t i = 0; i < t; ++i) {
    prefix.push_back(NewBn());
    if (!prefix.back() || BN_mod_mul(prefix[i + 1].get(), prefix[i].get(), den[i].get(), Prime(), ctx.get()) != 1)
      return failed;
  }
  Bn inverse = NewBn(), suffix = NewBn(), secret = NewBn();
  if (!inverse || !suffix || !secret || !BN_mod_inverse(inverse.get(), prefix[t].get(), Prime(), ctx.get()))
    return failed;
  BN_one(suffix.get());
  BN_zero(secret.get());
  for (size_t i = t; i-- > 0;) {  // suffix = Π_{k>i} den_k
    if (BN_mod_mul(term.get(), inverse.get(), prefix[i].get(), Prime(), ctx.get()) != 1 ||
        BN_mod_mul(term.get(), term.get(), suffix.get(), Prime(), ctx.get()) != 1 ||  // 1/den_i
        BN_mod_mul(term.get(), term.get(), num[i].get(), Prime(), ctx.get()) != 1 ||
        BN_mod_mul(term.get(), term.get(), y[i].get(), Prime(), ctx.get()) != 1 ||
        BN_mod_add(secret.get(), secret.get(), term.get(), Prime(), ctx.get()) != 1 ||
        BN_mod_mul(suffix.get(), suffix.get(), den[i].get(), Prime(), ctx.get()) != 1) {
      return failed;
    }
  }
  if (BN_num_bytes(secret.get()) > 32) return InvalidArgumentError("Shamir: the shares are not of one 32-byte secret");
  Secret32 out;
  if (BN_bn2binpad(secret.get(), out.data(), static_cast<int>(out.size())) < 0) return failed;
  return out;
}

}  // namespace plexus
