#include "simulations/attack.h"

#include <algorithm>
#include <cmath>

#include "tests/testing/status_matchers.h"
#include "tests/testing/vector_model.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

ModelState Vec(const std::vector<float>& v) { return ::plexus::testing::VectorModel(v); }

HonestStats TwoHonest() {
  HonestStats h;
  h.Add(Vec({1, 2}).data());
  h.Add(Vec({3, 2}).data());
  return h;  // mean (2, 2), std (1, 0)
}

TEST(AttackTest, EachAttackTransformsTheUpdateAsDefined) {
  Rng rng(1);
  ModelState d = Vec({1, -2});
  ApplyAttack(AttackKind::kSignFlip, TwoHonest(), 0.0, rng, d);
  EXPECT_EQ(d, Vec({-10, 20}));
  d = Vec({1, -2});
  ApplyAttack(AttackKind::kIpm, TwoHonest(), 0.0, rng, d);
  EXPECT_EQ(d, Vec({-1, -1}));
  d = Vec({1, -2});
  ApplyAttack(AttackKind::kAlie, TwoHonest(), 1.5, rng, d);
  EXPECT_EQ(d, Vec({0.5f, 2}));
  d = Vec({1, -2});
  ApplyAttack(AttackKind::kIpm, HonestStats(), 0.0, rng, d);  // nothing known yet: sign flip
  EXPECT_EQ(d, Vec({-10, 20}));
  d = Vec({1, -2});
  ApplyAttack(AttackKind::kLabelFlip, TwoHonest(), 0.0, rng, d);  // poisoned in training, sent as is
  EXPECT_EQ(d, Vec({1, -2}));
  EXPECT_EQ(kFlippedLabels[3], 6);
  ModelState a = Vec({0, 0}), b = Vec({0, 0});
  Rng r1(5), r2(5);
  ApplyAttack(AttackKind::kGaussian, TwoHonest(), 0.0, r1, a);
  ApplyAttack(AttackKind::kGaussian, TwoHonest(), 0.0, r2, b);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, Vec({0, 0}));
}

TEST(AttackTest, MinMaxGoesAsFarAlongMinusStdAsTheHonestSpreadAllows) {
  HonestStats honest(/*keep_updates=*/true);
  honest.Add(Vec({1, 2}).data());
  honest.Add(Vec({3, 2}).data());
  EXPECT_DOUBLE_EQ(honest.MaxPairwiseDistance(), 2.0);
  // mean (2, 2) + gamma x (-1, 0): distances |1 - gamma| and 1 + gamma, at most 2: gamma = 1.
  Rng rng(1);
  ModelState d = Vec({7, 7});
  ApplyAttack(AttackKind::kMinMax, honest, 0.0, rng, d);
  EXPECT_NEAR(d.data()[0], 1.0, 1e-4);
  EXPECT_NEAR(d.data()[1], 2.0, 1e-6);
  honest.Add(Vec({2, 5}).data());  // a wider spread: the crafted update ends on the bound
  const double bound = std::sqrt(10.0);
  EXPECT_DOUBLE_EQ(honest.MaxPairwiseDistance(), bound);
  d = Vec({7, 7});
  ApplyAttack(AttackKind::kMinMax, honest, 0.0, rng, d);
  double farthest = 0.0;
  for (const std::vector<float>& u : honest.updates()) {
    farthest = std::max<double>(farthest, std::hypot(d.data()[0] - u[0], d.data()[1] - u[1]));
  }
  EXPECT_LE(farthest, bound + 1e-5);
  EXPECT_GE(farthest, bound - 1e-3);
  EXPECT_LT(d.data()[0], 2.0);  // moved against the spread in both coordinates
  EXPECT_LT(d.data()[1], 3.0);
  d = Vec({1, -2});
  ApplyAttack(AttackKind::kMinMax, TwoHonest(), 0.0, rng, d);  // updates not kept: sign flip
  EXPECT_EQ(d, Vec({-10, 20}));
}

TEST(AttackTest, AlieZFollowsTheNormalQuantile) {
  EXPECT_NEAR(AlieZ(10, 2), 0.2533, 1e-3);   // s = 4, p = 0.6
  EXPECT_NEAR(AlieZ(50, 10), 0.4677, 1e-3);  // s = 16, p = 0.68
}

TEST(AttackTest, UnknownAttackIsNamed) {
  EXPECT_THAT(ParseAttack("minsum").status(),
              StatusIs(StatusCode::kInvalidArgument,
                       "known: none, signflip, gaussian, labelflip, ipm, alie, minmax; ipm takes eps=E, alie z=Z"));
  EXPECT_EQ(*ParseAttack("minmax"), AttackKind::kMinMax);
  EXPECT_EQ(*ParseAttack("labelflip"), AttackKind::kLabelFlip);
}

TEST(AttackTest, StrengthsAreParametersOfTheSpec) {
  AttackSpec ipm = *ParseAttackSpec("ipm:eps=4");
  EXPECT_EQ(ipm.kind, AttackKind::kIpm);
  Rng rng(1);
  ModelState d = Vec({1, -2});
  ApplyAttack(ipm, TwoHonest(), 0.0, rng, d);
  EXPECT_EQ(d, Vec({-8, -8}));  // -4 x the honest mean (2, 2)
  AttackSpec alie = *ParseAttackSpec("alie:z=3");
  d = Vec({1, -2});
  ApplyAttack(alie, TwoHonest(), 0.5, rng, d);  // the given z wins over the computed one
  EXPECT_EQ(d, Vec({-1, 2}));                   // mean (2, 2) - 3 x std (1, 0)
  EXPECT_EQ(ParseAttackSpec("ipm").value().ipm_epsilon, 0.5);
  EXPECT_THAT(ParseAttackSpec("ipm:eps=0").status(),
              StatusIs(StatusCode::kInvalidArgument, "ipm:eps must be positive"));
  EXPECT_THAT(ParseAttackSpec("signflip:eps=2").status(), StatusIs(StatusCode::kInvalidArgument, "eps"));
  EXPECT_THAT(ParseAttackSpec("sybil").status(), StatusIs(StatusCode::kInvalidArgument, "unknown attack 'sybil'"));
}

}  // namespace
}  // namespace plexus
