#include "server/rpc/adaptive_norm_bound.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#if PLEXUS_HAVE_RAPIDCHECK
#include <rapidcheck/gtest.h>
#endif

namespace plexus {
namespace {

TEST(AdaptiveNormBoundTest, StartsFromTheModelNormThenFollowsTheMedianOverClients) {
  AdaptiveNormBound bound(10, /*clients=*/5, /*min_clients=*/3);
  EXPECT_DOUBLE_EQ(bound.Bound(2.0), 20.0);   // nobody seen yet: 10 x the model's norm
  EXPECT_TRUE(std::isinf(bound.Bound(0.0)));  // a zero model says nothing
  bound.Observe("a", "t1", 1.0);
  bound.Observe("b", "t2", 3.0);
  EXPECT_DOUBLE_EQ(bound.Bound(2.0), 20.0);
  // One client sending many updates still holds one slot: two clients are not three.
  bound.Observe("b", "t3", 3.0);
  bound.Observe("b", "t4", 3.0);
  EXPECT_DOUBLE_EQ(bound.Bound(2.0), 20.0);
  bound.Observe("c", "t5", 2.0);
  EXPECT_DOUBLE_EQ(bound.Bound(100.0), 20.0);  // median of {1, 3, 2}
  // The window keeps the last five clients: the oldest stops counting.
  for (const char* c : {"d", "e", "f", "g"}) bound.Observe(c, std::string("x") + c, 0.5);
  EXPECT_EQ(bound.clients_seen(), 5u);
  EXPECT_DOUBLE_EQ(bound.Bound(100.0), 5.0);  // {2, 0.5, 0.5, 0.5, 0.5}
  bound.Observe("h", "y", NAN);               // ignored
  EXPECT_EQ(bound.clients_seen(), 5u);
}

TEST(AdaptiveNormBoundTest, AFactorOfZeroTurnsItOff) {
  AdaptiveNormBound bound(0);
  EXPECT_FALSE(bound.enabled());
  bound.Observe("a", "t", 1.0);
  EXPECT_TRUE(std::isinf(bound.Bound(1.0)));
}

// The finding: two of four participants sent norms of 0.004, the bound (median of accepted
// updates) fell to 0.04, and every honest update (2.9) was refused forever after.
TEST(AdaptiveNormBoundTest, AMinorityOfTinyUpdatesCannotLockHonestClientsOut) {
  AdaptiveNormBound bound(10, 100, /*min_clients=*/4);
  int task = 0;
  auto send = [&](const std::string& client, double norm) {
    const bool accepted = norm <= bound.Bound(1.0);
    bound.Observe(client, "t" + std::to_string(task++), norm);
    return accepted;
  };
  for (int round = 0; round < 50; ++round) {
    // The tiny clients are fast: they send ten updates for every honest one.
    for (int k = 0; k < 10; ++k) {
      send("tiny1", 0.004);
      send("tiny2", 0.004);
    }
    EXPECT_TRUE(send("honest1", 2.9)) << round;
    EXPECT_TRUE(send("honest2", 3.1)) << round;
  }
}

TEST(AdaptiveNormBoundTest, RefusedNormsCountSoTheBoundFollowsWhatClientsSend) {
  AdaptiveNormBound bound(10, 100, /*min_clients=*/3);
  for (const char* c : {"a", "b", "c"}) bound.Observe(c, c, 0.001);
  EXPECT_DOUBLE_EQ(bound.Bound(1.0), 0.01);
  // Honest clients that trained more now send 1.0: refused at first, counted all the same.
  for (const char* c : {"d", "e"}) {
    EXPECT_GT(1.0, bound.Bound(1.0));
    bound.Observe(c, c, 1.0);
  }
  bound.Observe("f", "f", 1.0);
  EXPECT_DOUBLE_EQ(bound.Bound(1.0), 10.0);  // as many at 1.0 as at 0.001: the upper median
}

TEST(AdaptiveNormBoundTest, AnUpdateSentAgainIsNotCountedAgain) {
  AdaptiveNormBound bound(10, 100, /*min_clients=*/1);
  bound.Observe("a", "t1", 2.0);
  bound.Observe("a", "t1", 0.001);  // the same task again: ignored
  EXPECT_DOUBLE_EQ(bound.Bound(1.0), 20.0);
  bound.Observe("a", "t2", 0.5);  // a new task replaces the client's slot
  EXPECT_DOUBLE_EQ(bound.Bound(1.0), 5.0);
}

#if PLEXUS_HAVE_RAPIDCHECK
// The law of docs/security.md: while the attacker holds fewer than half of the clients in the
// window, the bound stays within [factor x smallest honest norm, factor x largest honest norm],
// whatever norms the attacker sends and in whatever order.
RC_GTEST_PROP(AdaptiveNormBoundProperty, AMinorityCannotMoveTheBoundOutOfTheHonestRange, ()) {
  const int honest = *rc::gen::inRange(3, 20);
  const int attackers = *rc::gen::inRange(0, honest);  // strictly fewer than the honest
  const std::vector<double> honest_norms = *rc::gen::container<std::vector<double>>(
      static_cast<size_t>(honest), rc::gen::map(rc::gen::inRange(1, 10000), [](int v) { return v / 100.0; }));
  AdaptiveNormBound bound(10, 1000, /*min_clients=*/1);
  std::vector<std::pair<std::string, double>> sends;
  for (int i = 0; i < honest; ++i) sends.emplace_back("h" + std::to_string(i), honest_norms[static_cast<size_t>(i)]);
  for (int i = 0; i < attackers; ++i) {
    const int sends_of_one = *rc::gen::inRange(1, 5);
    for (int k = 0; k < sends_of_one; ++k) {
      const double norm = *rc::gen::element(0.0, 1e-9, 1e-3, 1e3, 1e30);
      sends.emplace_back("a" + std::to_string(i), norm);
    }
  }
  const std::vector<size_t> order =
      *rc::gen::container<std::vector<size_t>>(sends.size(), rc::gen::inRange<size_t>(0, 1000));
  std::vector<size_t> idx(sends.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return order[a] < order[b]; });
  int task = 0;
  for (size_t i : idx) bound.Observe(sends[i].first, "t" + std::to_string(task++), sends[i].second);
  const double b = bound.Bound(1.0);
  const auto [lo, hi] = std::minmax_element(honest_norms.begin(), honest_norms.end());
  RC_ASSERT(b >= 10 * *lo);
  RC_ASSERT(b <= 10 * *hi);
}
#endif

}  // namespace
}  // namespace plexus
