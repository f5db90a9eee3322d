// Secure aggregation's state machines, run against each other in memory: the server gets exactly
// the sum of the inputs it says it included, with members dropping out at every stage; an honest
// member refuses to reveal both secrets of another; what the server holds of one member's input
// looks uniform; malformed, replayed, misaddressed and late messages are refused with the round
// unharmed; too few answers abort it.
#include "privacy/secagg.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "core/rng.h"
#include "core/thread_pool.h"
#include "tests/testing/status_matchers.h"

namespace plexus::secagg {
namespace {

using ::plexus::testing::StatusIs;

Params Group(int n, int degree, int threshold, size_t length) {
  Params p;
  p.round = 7;
  for (int i = 1; i <= n; ++i) p.members.push_back(static_cast<uint32_t>(i * 10));
  p.degree = degree;
  p.threshold = threshold;
  p.graph_seed = 99;
  p.length = length;
  return p;
}

// Runs one round. `drop_after[m] = s`: member m answers stages before s only (1: advertised and
// left; 2: shared keys and left; 3: sent its masked input and left before unmasking).
struct Round {
  Params params;
  std::map<uint32_t, std::vector<uint32_t>> inputs;
  std::map<uint32_t, std::unique_ptr<Member>> members;
  std::unique_ptr<Server> server;
  int64_t now = 0;

  explicit Round(Params p, ThreadPool* pool = nullptr) : params(std::move(p)) {
    Rng rng(3);
    for (uint32_t m : params.members) {
      std::vector<uint32_t> x(params.length);
      for (uint32_t& v : x) v = static_cast<uint32_t>(rng.NextU64());
      inputs[m] = x;
      members[m] = std::move(Member::Create(params, m)).value();
    }
    server = std::move(Server::Create(params, now, 1000, pool)).value();
  }

  void Run(const std::map<uint32_t, int>& drop_after) {
    auto active = [&](uint32_t m, int stage) {
      auto it = drop_after.find(m);
      return it == drop_after.end() || it->second > stage;
    };
    for (uint32_t m : params.members) {
      if (active(m, 0)) {
        ASSERT_OK(server->Receive(*members[m]->Advertise(), now));
      }
    }
    CloseIfWaiting(Server::Stage::kAdvertise);  // those that left are not waited for beyond the deadline
    ASSERT_EQ(server->stage(), Server::Stage::kShareKeys);
    for (uint32_t m : server->expected()) {
      if (active(m, 1)) {
        ASSERT_OK(server->Receive(*members[m]->ShareKeys(server->AdvertsFor(m)), now));
      }
    }
    CloseIfWaiting(Server::Stage::kShareKeys);
    ASSERT_EQ(server->stage(), Server::Stage::kMaskedInput);
    for (uint32_t m : server->expected()) {
      if (active(m, 2)) {
        ASSERT_OK(server->Receive(*members[m]->MaskInput(inputs[m], server->SharesFor(m)), now));
      }
    }
    CloseIfWaiting(Server::Stage::kMaskedInput);
    ASSERT_EQ(server->stage(), Server::Stage::kUnmask);
    for (uint32_t m : server->expected()) {
      if (active(m, 3)) {
        ASSERT_OK(server->Receive(*members[m]->Unmask(server->UnmaskRequestFor(m)), now));
      }
    }
    CloseIfWaiting(Server::Stage::kUnmask);
  }

  // A stage that everyone answered closed at once; one still waiting for a member that left
  // closes at its deadline.
  void CloseIfWaiting(Server::Stage stage) {
    if (server->stage() != stage) return;
    now = server->deadline_ms();
    server->Tick(now);
  }

  std::vector<uint32_t> PlainSum(const std::vector<uint32_t>& of) {
    std::vector<uint32_t> sum(params.length, 0);
    for (uint32_t m : of) {
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += inputs[m][i];
    }
    return sum;
  }
};

TEST(SecAggTest, TheServerGetsExactlyTheSum) {
  Round r(Group(8, 4, 3, 1000));
  r.Run({});
  ASSERT_EQ(r.server->stage(), Server::Stage::kDone) << r.server->abort_reason();
  EXPECT_EQ(r.server->included(), r.params.members);
  EXPECT_EQ(r.server->sum(), r.PlainSum(r.params.members));
}

// Members leave after advertising (30), after sharing keys (50: its pairwise masks are in its
// neighbours' inputs and are taken back from its recovered key) and after sending the masked
// input (70: its input counts; its self mask comes off with its neighbours' shares).
TEST(SecAggTest, DropoutsAtEveryStageStillGiveTheSumOfWhoIsIncluded) {
  Round r(Group(12, 6, 3, 500));
  r.Run({{30, 1}, {50, 2}, {70, 3}});
  ASSERT_EQ(r.server->stage(), Server::Stage::kDone) << r.server->abort_reason();
  std::vector<uint32_t> included;
  for (uint32_t m : r.params.members) {
    if (m != 30 && m != 50) included.push_back(m);
  }
  EXPECT_EQ(r.server->included(), included);
  EXPECT_EQ(r.server->sum(), r.PlainSum(included));
}

// Unmasking on a pool (the secrets split over its threads, each into its own accumulator) gives
// the same sum, with survivors and dropped members' jobs in every thread's share.
TEST(SecAggTest, UnmaskingOnAPoolGivesTheSameSum) {
  ThreadPool pool(3);
  Round r(Group(30, 6, 3, 300), &pool);
  r.Run({{50, 2}, {120, 2}, {250, 2}, {70, 3}});
  ASSERT_EQ(r.server->stage(), Server::Stage::kDone) << r.server->abort_reason();
  std::vector<uint32_t> included;
  for (uint32_t m : r.params.members) {
    if (m != 50 && m != 120 && m != 250) included.push_back(m);
  }
  EXPECT_EQ(r.server->included(), included);
  EXPECT_EQ(r.server->sum(), r.PlainSum(included));
}

TEST(SecAggTest, TheGraphIsRegularSymmetricAndTheSameForEveryone) {
  const Params p = Group(20, 6, 3, 1);
  for (uint32_t m : p.members) {
    const std::vector<uint32_t> n = Neighbours(p, m);
    EXPECT_EQ(n.size(), 6u);
    for (uint32_t o : n) {
      const std::vector<uint32_t> back = Neighbours(p, o);
      EXPECT_TRUE(std::binary_search(back.begin(), back.end(), m)) << m << " - " << o;
    }
  }
  Params other = p;
  other.graph_seed = 100;
  size_t differ = 0;
  for (uint32_t m : p.members) differ += Neighbours(p, m) != Neighbours(other, m);
  EXPECT_GT(differ, 0u);
}

// A malicious server names a member both survivor and dropped, to get its self seed and its mask
// key (and with them its input): refused, nothing revealed; and a member answers once.
TEST(SecAggTest, AnHonestMemberNeverRevealsBothSecretsOfAnother) {
  Round r(Group(6, 4, 2, 10));
  for (uint32_t m : r.params.members) ASSERT_OK(r.server->Receive(*r.members[m]->Advertise(), 0));
  for (uint32_t m : r.params.members)
    ASSERT_OK(r.server->Receive(*r.members[m]->ShareKeys(r.server->AdvertsFor(m)), 0));
  for (uint32_t m : r.params.members) {
    ASSERT_OK(r.server->Receive(*r.members[m]->MaskInput(r.inputs[m], r.server->SharesFor(m)), 0));
  }
  Member& honest = *r.members[10];
  const uint32_t victim = Neighbours(r.params, 10).front();
  UnmaskRequest both{r.params.members, {victim}};
  EXPECT_THAT(honest.Unmask(both).status(), StatusIs(StatusCode::kPermissionDenied, "both survivor and dropped"));
  UnmaskRequest fair{r.params.members, {}};
  ASSERT_OK(honest.Unmask(fair));
  UnmaskRequest later{{10, 20, 40, 50, 60}, {victim}};  // then claims the victim dropped after all
  EXPECT_THAT(honest.Unmask(later).status(), StatusIs(StatusCode::kPermissionDenied, "once a round"));
  UnmaskRequest without_me{{20, 30}, {}};
  EXPECT_THAT(r.members[20]->Unmask(UnmaskRequest{{30, 40}, {}}).status(),
              StatusIs(StatusCode::kPermissionDenied, "not among the survivors"));
  (void)without_me;
}

// What the server holds of one member is its masked input: with an input of zeros, the values
// are uniform mod 2^32 (chi-square over 16 bins of the top bits, 20,000 values).
TEST(SecAggTest, AMaskedInputLooksUniform) {
  Params p = Group(4, 3, 2, 20000);
  auto a = std::move(Member::Create(p, 10)).value();
  std::map<uint32_t, std::unique_ptr<Member>> others;
  auto server = std::move(Server::Create(p, 0, 1000)).value();
  ASSERT_OK(server->Receive(*a->Advertise(), 0));
  for (uint32_t m : {20u, 30u, 40u}) {
    others[m] = std::move(Member::Create(p, m)).value();
    ASSERT_OK(server->Receive(*others[m]->Advertise(), 0));
  }
  ASSERT_OK(server->Receive(*a->ShareKeys(server->AdvertsFor(10)), 0));
  for (auto& [m, member] : others) ASSERT_OK(server->Receive(*member->ShareKeys(server->AdvertsFor(m)), 0));
  const std::vector<uint32_t> zeros(p.length, 0);
  Result<MaskedInput> masked = a->MaskInput(zeros, server->SharesFor(10));
  ASSERT_OK(masked);
  std::vector<double> bins(16, 0);
  for (uint32_t v : masked->values) bins[v >> 28] += 1;
  const double expected = static_cast<double>(p.length) / 16;
  double chi2 = 0;
  for (double b : bins) chi2 += (b - expected) * (b - expected) / expected;
  EXPECT_LT(chi2, 37.7);  // the 0.1% point of chi-square with 15 degrees of freedom
}

TEST(SecAggTest, BadMessagesAreRefusedAndTheRoundGoesOn) {
  Round r(Group(6, 4, 2, 8));
  Member& a = *r.members[10];
  const KeyAdvert advert = *a.Advertise();
  ASSERT_OK(r.server->Receive(advert, 0));
  EXPECT_THAT(r.server->Receive(advert, 0), StatusIs(StatusCode::kInvalidArgument, "second"));  // replayed
  KeyAdvert stranger = advert;
  stranger.from = 99;
  EXPECT_THAT(r.server->Receive(stranger, 0), StatusIs(StatusCode::kInvalidArgument, "not expected"));
  for (uint32_t m : r.params.members) {
    if (m != 10) {
      ASSERT_OK(r.server->Receive(*r.members[m]->Advertise(), 0));
    }
  }
  ASSERT_EQ(r.server->stage(), Server::Stage::kShareKeys);  // everyone answered: closed early
  EXPECT_THAT(r.server->Receive(advert, 0), StatusIs(StatusCode::kFailedPrecondition, "late, early or replayed"));
  SealedShares shares = *a.ShareKeys(r.server->AdvertsFor(10));
  SealedShares misaddressed = shares;
  uint32_t not_neighbour = 0;
  for (uint32_t m : r.params.members) {
    const auto n = Neighbours(r.params, 10);
    if (m != 10 && !std::binary_search(n.begin(), n.end(), m)) not_neighbour = m;
  }
  misaddressed.to[not_neighbour] = shares.to.begin()->second;
  EXPECT_THAT(r.server->Receive(misaddressed, 0), StatusIs(StatusCode::kInvalidArgument, "advertised neighbours"));
  ASSERT_OK(r.server->Receive(shares, 0));
  for (uint32_t m : r.params.members) {
    if (m != 10) {
      ASSERT_OK(r.server->Receive(*r.members[m]->ShareKeys(r.server->AdvertsFor(m)), 0));
    }
  }
  ASSERT_EQ(r.server->stage(), Server::Stage::kMaskedInput);
  MaskedInput masked = *a.MaskInput(r.inputs[10], r.server->SharesFor(10));
  MaskedInput short_one = masked;
  short_one.values.pop_back();
  EXPECT_THAT(r.server->Receive(short_one, 0), StatusIs(StatusCode::kInvalidArgument, "the round takes 8"));
  // A member's own check: shares altered on the way do not open.
  std::map<uint32_t, std::vector<uint8_t>> altered = r.server->SharesFor(20);
  altered.begin()->second[5] ^= 1;
  EXPECT_THAT(r.members[20]->MaskInput(r.inputs[20], altered).status(),
              StatusIs(StatusCode::kInvalidArgument, "does not open"));
  ASSERT_OK(r.server->Receive(masked, 0));
  // The deadline passes: the others' inputs come too late, and 10 alone is below the threshold.
  r.server->Tick(1000);
  EXPECT_EQ(r.server->stage(), Server::Stage::kAborted);
  EXPECT_NE(r.server->abort_reason().find("fewer than the threshold"), std::string::npos) << r.server->abort_reason();
  EXPECT_THAT(r.server->Receive(*r.members[30]->MaskInput(r.inputs[30], {}), 1000),
              StatusIs(StatusCode::kFailedPrecondition, "masked input"));
  EXPECT_TRUE(r.server->sum().empty());  // nothing half-released
}

TEST(SecAggTest, RefusesSettingsThatMeanNothing) {
  Params p = Group(6, 4, 2, 8);
  p.degree = 3;
  EXPECT_THAT(p.Validate(), StatusIs(StatusCode::kInvalidArgument, "degree"));
  p = Group(6, 4, 5, 8);
  EXPECT_THAT(p.Validate(), StatusIs(StatusCode::kInvalidArgument, "threshold"));
  p = Group(6, 4, 2, 0);
  EXPECT_THAT(p.Validate(), StatusIs(StatusCode::kInvalidArgument, "length"));
  p = Group(6, 4, 2, 8);
  p.members.push_back(10);
  EXPECT_THAT(p.Validate(), StatusIs(StatusCode::kInvalidArgument, "twice"));
  EXPECT_THAT(Member::Create(Group(6, 4, 2, 8), 11).status(),
              StatusIs(StatusCode::kInvalidArgument, "not in the group"));
}

}  // namespace
}  // namespace plexus::secagg
