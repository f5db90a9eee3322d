#include "simulations/attack.h"

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

TEST(AttackTest, AlieZFollowsTheNormalQuantile) {
  EXPECT_NEAR(AlieZ(10, 2), 0.2533, 1e-3);  // s = 4, p = 0.6
  EXPECT_NEAR(AlieZ(50, 10), 0.4677, 1e-3);  // s = 16, p = 0.68
}

TEST(AttackTest, UnknownAttackIsNamed) {
  EXPECT_THAT(ParseAttack("minmax").status(),
              StatusIs(StatusCode::kInvalidArgument, "known: none, signflip, gaussian, labelflip, ipm, alie"));
  EXPECT_EQ(*ParseAttack("labelflip"), AttackKind::kLabelFlip);
}

}  // namespace
}  // namespace plexus
