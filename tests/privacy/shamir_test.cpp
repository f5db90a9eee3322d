// Shamir sharing of 32-byte secrets: any `threshold` shares give the secret back, whichever they
// are (a property test over random secrets, thresholds and subsets); fewer give something else;
// malformed shares are refused.
#include "privacy/shamir.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

Secret32 SecretFrom(const std::vector<uint8_t>& bytes) {
  Secret32 s{};
  std::copy_n(bytes.begin(), std::min(bytes.size(), s.size()), s.begin());
  return s;
}

RC_GTEST_PROP(ShamirLaws, AnyThresholdSharesRecoverTheSecret, ()) {
  const Secret32 secret = SecretFrom(*rc::gen::container<std::vector<uint8_t>>(32, rc::gen::arbitrary<uint8_t>()));
  const int n = *rc::gen::inRange(2, 20);
  const int t = *rc::gen::inRange(1, n + 1);
  std::vector<uint32_t> xs(static_cast<size_t>(n));
  std::iota(xs.begin(), xs.end(), *rc::gen::inRange<uint32_t>(1, 1000));
  Result<std::vector<ShamirShare>> shares = ShamirSplit(secret, t, xs);
  RC_ASSERT(shares.ok());
  std::vector<ShamirShare> picked = *shares;
  std::mt19937 shuffle(*rc::gen::arbitrary<uint32_t>());
  std::shuffle(picked.begin(), picked.end(), shuffle);
  picked.resize(static_cast<size_t>(t));
  Result<Secret32> back = ShamirRecover(picked, t);
  RC_ASSERT(back.ok());
  RC_ASSERT(*back == secret);
  if (t > 1) {  // one share too few: interpolation at 0 gives another number
    Result<Secret32> short_of_one = ShamirRecover(std::span<const ShamirShare>(picked).first(t - 1), t - 1);
    const bool another = !short_of_one.ok() || *short_of_one != secret;  // RC_ASSERT would not short-circuit ||
    RC_ASSERT(another);
  }
}

TEST(ShamirTest, RefusesMalformedShares) {
  Secret32 s{};
  s[0] = 1;
  const std::vector<uint32_t> xs = {1, 2, 3};
  EXPECT_THAT(ShamirSplit(s, 0, xs).status(), StatusIs(StatusCode::kInvalidArgument, "threshold"));
  EXPECT_THAT(ShamirSplit(s, 4, xs).status(), StatusIs(StatusCode::kInvalidArgument, "threshold"));
  const std::vector<uint32_t> with_zero = {0, 1}, twice = {2, 2};
  EXPECT_THAT(ShamirSplit(s, 2, with_zero).status(), StatusIs(StatusCode::kInvalidArgument, "point 0"));
  EXPECT_THAT(ShamirSplit(s, 2, twice).status(), StatusIs(StatusCode::kInvalidArgument, "two shares"));
  std::vector<ShamirShare> shares = *ShamirSplit(s, 2, xs);
  EXPECT_THAT(ShamirRecover(std::span<const ShamirShare>(shares).first(1), 2).status(),
              StatusIs(StatusCode::kInvalidArgument, "needed"));
  shares[0].y.pop_back();
  EXPECT_THAT(ShamirRecover(shares, 2).status(), StatusIs(StatusCode::kInvalidArgument, "length"));
  shares[0].y.assign(kShamirShareBytes, 0xff);
  EXPECT_THAT(ShamirRecover(shares, 2).status(), StatusIs(StatusCode::kInvalidArgument, "outside the field"));
}

}  // namespace
}  // namespace plexus
