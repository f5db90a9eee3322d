// The CRDT layer: signatures, content addresses, the OR-Set's laws, Merkle sync, and identical
// merged bytes whatever the delivery order.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstring>

#include "core/rng.h"
#include "crdt/crdt_replica.h"
#include "crdt/merkle_digest.h"
#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

SigningKey KeyFor(int author) { return *SigningKey::FromSeed(std::string(31, 'k') + static_cast<char>('A' + author)); }

// Author i's signed contribution number `n`: a 40-value delta drawn from a seeded generator.
Contribution Make(int author, int n, int64_t examples = 10) {
  Contribution c;
  c.author = "author-" + std::to_string(author);
  c.examples = examples + n;
  c.created_round = static_cast<uint64_t>(n);
  c.delta = *ModelState::Create({{"w", {32}}, {"b", {8}}});
  Rng rng = Rng::Derive(static_cast<uint64_t>(author), static_cast<uint64_t>(n));
  for (float& x : c.delta.data()) x = static_cast<float>(rng.Normal());
  EXPECT_OK(Sign(c, KeyFor(author)));
  return c;
}

AuthorKeys Keys(int authors) {
  AuthorKeys k;
  for (int i = 0; i < authors; ++i) k.Add("author-" + std::to_string(i), KeyFor(i).public_key());
  return k;
}

ModelState Base() { return *ModelState::Create({{"w", {32}}, {"b", {8}}}); }

TEST(SigningTest, SignAndVerify) {
  const SigningKey k = KeyFor(0);
  const std::string sig = *k.Sign("hello");
  EXPECT_EQ(sig.size(), 64u);
  EXPECT_OK(VerifySignature(k.public_key(), "hello", sig));
  EXPECT_THAT(VerifySignature(k.public_key(), "hellO", sig),
              StatusIs(StatusCode::kPermissionDenied, "does not verify"));
  EXPECT_THAT(VerifySignature(KeyFor(1).public_key(), "hello", sig),
              StatusIs(StatusCode::kPermissionDenied, "does not verify"));
  const SigningKey fresh = *SigningKey::Generate();
  EXPECT_OK(VerifySignature(fresh.public_key(), "x", *fresh.Sign("x")));
}

TEST(ContributionTest, TamperedOrMisattributedContributionsAreRefused) {
  const AuthorKeys keys = Keys(2);
  CrdtReplica r("r", &keys);
  Contribution good = Make(0, 1);
  ASSERT_OK(r.Add(good));

  Contribution flipped = Make(0, 2);
  const std::string claimed = flipped.Id();
  uint32_t bits;
  std::memcpy(&bits, &flipped.delta.data()[3], 4);
  bits ^= 1u;
  std::memcpy(&flipped.delta.data()[3], &bits, 4);
  EXPECT_THAT(keys.Verify(claimed, flipped), StatusIs(StatusCode::kInvalidArgument, "does not match its content"));
  // Re-signed after the flip by someone else: the id matches, the signer does not.
  Contribution forged = flipped;
  ASSERT_OK(Sign(forged, KeyFor(1)));
  EXPECT_THAT(r.Add(forged), StatusIs(StatusCode::kPermissionDenied, "does not verify"));
  Contribution stranger = Make(0, 3);
  stranger.author = "author-9";
  ASSERT_OK(Sign(stranger, KeyFor(0)));
  EXPECT_THAT(r.Add(stranger), StatusIs(StatusCode::kPermissionDenied, "unknown author"));
  EXPECT_EQ(r.LiveIds(), std::vector<std::string>{good.Id()});  // nothing else got in
}

TEST(ContributionSetTest, ReAddConcurrentWithRemoveSurvives) {
  ContributionSet a("a"), b("b");
  a.Add("x");
  b.Join(a);
  b.Remove("x");  // b retracts the add it observed...
  a.Add("x");     // ...while a adds x again: a fresh dot b has not seen
  a.Join(b);
  b.Join(a);
  EXPECT_TRUE(a.Contains("x"));
  EXPECT_TRUE(b.Contains("x"));
  EXPECT_TRUE(a.SameState(b));
}

TEST(ContributionSetTest, RetractionConverges) {
  ContributionSet a("a"), b("b"), c("c");
  a.Add("x");
  a.Add("y");
  b.Join(a);
  c.Join(a);
  b.Remove("x");
  c.Join(b);
  a.Join(c);
  for (const ContributionSet* s : {&a, &c}) EXPECT_EQ(s->Live(), std::vector<std::string>{"y"});
}

TEST(MerkleDigestTest, FindsExactlyTheDifferenceWithFewHashes) {
  std::vector<std::string> base;
  for (int i = 0; i < 2000; ++i) base.push_back("entry-" + std::to_string(i));
  std::vector<std::string> more = base;
  more.push_back("new-1");
  more.push_back("new-2");
  size_t hashes = 0;
  std::vector<std::string> missing = MissingFrom(MerkleDigest(base), MerkleDigest(more), &hashes);
  std::sort(missing.begin(), missing.end());
  EXPECT_EQ(missing, (std::vector<std::string>{"new-1", "new-2"}));
  EXPECT_LT(hashes, 100u);  // about 2 x 16 x log16(2000), not 2000
  EXPECT_EQ(MerkleDigest(base).Root(), MerkleDigest(std::vector<std::string>(base.rbegin(), base.rend())).Root());
  EXPECT_TRUE(MissingFrom(MerkleDigest(more), MerkleDigest(base), &hashes).empty());
}

const char* const kStrategies[] = {"fedavg", "median", "trimmed_mean:beta=0.2", "ties:density=0.3", "dare:p=0.3"};

TEST(CrdtReplicaTest, EveryDeliveryOrderGivesTheSameBytes) {
  const AuthorKeys keys = Keys(6);
  std::vector<Contribution> all;
  for (int a = 0; a < 6; ++a) all.push_back(Make(a, 0));
  std::vector<std::string> reference;
  for (uint64_t order = 0; order < 8; ++order) {
    std::vector<size_t> idx = {0, 1, 2, 3, 4, 5, 2, 4};  // with duplicates
    Rng rng(order);
    rng.Shuffle(std::span<size_t>(idx));
    CrdtReplica r("r" + std::to_string(order), &keys);
    for (size_t i : idx) ASSERT_OK(r.Add(all[i]));
    std::vector<std::string> hashes;
    for (const char* s : kStrategies) hashes.push_back(r.Resolve(s, Base())->ContentSha256());
    if (order == 0) reference = hashes;
    EXPECT_EQ(hashes, reference) << "order " << order;
  }
}

TEST(CrdtReplicaTest, ResolveIsAPureFunctionOfTheSetEvenForStatefulStrategies) {
  const AuthorKeys keys = Keys(2);
  CrdtReplica r("r", &keys);
  ASSERT_OK(r.Add(Make(0, 0)));
  ASSERT_OK(r.Add(Make(1, 0)));
  for (const char* s : {"fedavgm:momentum=0.9", "fedadam"}) {
    EXPECT_EQ(r.Resolve(s, Base())->ContentSha256(), r.Resolve(s, Base())->ContentSha256()) << s;
  }
}

TEST(CrdtReplicaTest, SyncCarriesContributionsAndRetractions) {
  const AuthorKeys keys = Keys(3);
  CrdtReplica a("a", &keys), b("b", &keys);
  const std::string x = *a.Add(Make(0, 0));
  ASSERT_OK(a.Add(Make(1, 0)));
  ASSERT_OK(b.Add(Make(2, 0)));
  ASSERT_OK(b.SyncFrom(a));
  ASSERT_OK(a.SyncFrom(b));
  EXPECT_EQ(a.StateDigest(), b.StateDigest());
  EXPECT_EQ(a.LiveIds().size(), 3u);
  ASSERT_OK(b.Retract(x));
  ASSERT_OK(a.SyncFrom(b));
  EXPECT_EQ(a.LiveIds().size(), 2u);
  EXPECT_EQ(a.Resolve("median", Base())->ContentSha256(), b.Resolve("median", Base())->ContentSha256());
  EXPECT_THAT(a.Retract(x), StatusIs(StatusCode::kNotFound, "not live"));
  EXPECT_THAT(CrdtReplica("empty", &keys).Resolve("fedavg", Base()),
              StatusIs(StatusCode::kFailedPrecondition, "no live contributions"));
}

// A peer that ships a tampered copy of every contribution it is asked for.
class TamperingPeer final : public SyncPeer {
 public:
  explicit TamperingPeer(const CrdtReplica& r) : inner_(r) {}
  const DigestSource& digest() override { return inner_.digest(); }
  Result<StateDelta> Fetch(const std::vector<std::string>& entries) override {
    PLEXUS_ASSIGN_OR_RETURN(StateDelta d, inner_.Fetch(entries));
    for (auto& [id, c] : d.contributions) c.delta.data()[0] += 1.0f;
    return d;
  }

 private:
  LocalPeer inner_;
};

TEST(CrdtReplicaTest, SyncFromALyingPeerJoinsNothing) {
  const AuthorKeys keys = Keys(3);
  CrdtReplica honest("honest", &keys), victim("victim", &keys);
  ASSERT_OK(honest.Add(Make(0, 0)));
  ASSERT_OK(honest.Add(Make(1, 0)));
  ASSERT_OK(victim.Add(Make(2, 0)));
  const std::string before = victim.StateDigest();
  TamperingPeer liar(honest);
  EXPECT_THAT(victim.SyncFrom(liar).status(), StatusIs(StatusCode::kInvalidArgument, "does not match its content"));
  EXPECT_EQ(victim.StateDigest(), before);
  EXPECT_EQ(victim.LiveIds().size(), 1u);
}

// Random histories of adds, retractions and joins over three replicas.
struct History {
  std::vector<ContributionSet> states;
};

ContributionSet RandomState(const std::string& replica) {
  ContributionSet s(replica);
  const int ops = *rc::gen::inRange(0, 12);
  for (int i = 0; i < ops; ++i) {
    const std::string id = "c" + std::to_string(*rc::gen::inRange(0, 6));
    if (*rc::gen::inRange(0, 3) == 0) {
      s.Remove(id);
    } else {
      s.Add(id);
    }
  }
  return s;
}

ContributionSet Joined(ContributionSet a, const ContributionSet& b) {
  a.Join(b);
  return a;
}

RC_GTEST_PROP(ContributionSetProperties, JoinIsCommutativeAssociativeIdempotent, ()) {
  ContributionSet a = RandomState("a"), b = RandomState("b"), c = RandomState("c");
  // Let the replicas observe each other partly, so removes can hit others' dots.
  if (*rc::gen::arbitrary<bool>()) {
    b.Join(a);
    b.Remove("c" + std::to_string(*rc::gen::inRange(0, 6)));
  }
  RC_ASSERT(Joined(a, b).SameState(Joined(b, a)));
  RC_ASSERT(Joined(Joined(a, b), c).SameState(Joined(a, Joined(b, c))));
  RC_ASSERT(Joined(a, a).SameState(a));
  RC_ASSERT(Joined(Joined(a, b), b).SameState(Joined(a, b)));
}

RC_GTEST_PROP(CrdtReplicaProperties, MergedBytesIgnoreOrderAndDuplication, ()) {
  static const AuthorKeys keys = Keys(5);
  static const std::vector<Contribution> all = [] {
    std::vector<Contribution> v;
    for (int a = 0; a < 5; ++a) v.push_back(Make(a, 1));
    return v;
  }();
  const auto picks = *rc::gen::container<std::vector<int>>(rc::gen::inRange(0, 5));
  RC_PRE(!picks.empty());
  // The same picks in a rotated order, plus a duplicate.
  std::vector<int> shuffled = picks;
  std::rotate(shuffled.begin(), shuffled.begin() + *rc::gen::inRange<size_t>(0, picks.size()), shuffled.end());
  std::reverse(shuffled.begin(), shuffled.end());
  const auto dup = *rc::gen::elementOf(picks);
  shuffled.push_back(dup);
  CrdtReplica x("x", &keys), y("y", &keys);
  for (int i : picks) RC_ASSERT(x.Add(all[static_cast<size_t>(i)]).ok());
  for (int i : shuffled) RC_ASSERT(y.Add(all[static_cast<size_t>(i)]).ok());
  const char* strategy = *rc::gen::elementOf(std::vector<const char*>(std::begin(kStrategies), std::end(kStrategies)));
  RC_ASSERT(x.Resolve(strategy, Base())->ContentSha256() == y.Resolve(strategy, Base())->ContentSha256());
}

}  // namespace
}  // namespace plexus
