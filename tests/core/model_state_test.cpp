#include "core/model_state.h"

#include <cmath>

#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

ModelState TwoTensors() {
  Result<ModelState> m = ModelState::Create({{"w", {2, 3}}, {"b", {3}}});
  EXPECT_OK(m);
  return *m;
}

TEST(ModelStateTest, LaysTensorsOutInOrder) {
  ModelState m = TwoTensors();
  ASSERT_EQ(m.tensors().size(), 2u);
  EXPECT_EQ(m.tensors()[1].offset, 6u);
  EXPECT_EQ(m.num_params(), 9u);
  m.tensor(1)[2] = 5.0f;
  EXPECT_EQ(m.data()[8], 5.0f);
}

TEST(ModelStateTest, RefusesDuplicateAndNegative) {
  EXPECT_THAT(ModelState::Create({{"a", {1}}, {"a", {2}}}), StatusIs(StatusCode::kInvalidArgument, "duplicate"));
  EXPECT_THAT(ModelState::Create({{"a", {-1}}}), StatusIs(StatusCode::kInvalidArgument, "negative"));
}

TEST(ModelStateTest, LayoutMismatchNamesTheTensor) {
  ModelState a = TwoTensors();
  ModelState b = *ModelState::Create({{"w", {3, 2}}, {"b", {3}}});
  EXPECT_THAT(b.CheckSameLayout(a), StatusIs(StatusCode::kInvalidArgument, "tensor 'w' has shape [3, 2], expected [2, 3]"));
  ModelState c = *ModelState::Create({{"w", {2, 3}}});
  EXPECT_THAT(c.CheckSameLayout(a), StatusIs(StatusCode::kInvalidArgument, "1 tensors, expected 2"));
}

TEST(ModelStateTest, FindsNonFiniteValues) {
  ModelState m = TwoTensors();
  EXPECT_OK(m.CheckFinite());
  m.tensor(1)[1] = std::nanf("");
  EXPECT_THAT(m.CheckFinite(), StatusIs(StatusCode::kInvalidArgument, "tensor 'b' holds a non-finite value"));
}

TEST(ModelStateTest, HashCoversValuesAndNamesButNotVersion) {
  ModelState a = TwoTensors();
  ModelState b = TwoTensors();
  b.set_version(9);
  EXPECT_EQ(a.ContentSha256(), b.ContentSha256());
  EXPECT_EQ(a.ContentSha256().size(), 64u);
  b.data()[0] = 1.0f;
  EXPECT_NE(a.ContentSha256(), b.ContentSha256());
  ModelState renamed = *ModelState::Create({{"v", {2, 3}}, {"b", {3}}});
  EXPECT_NE(a.ContentSha256(), renamed.ContentSha256());
}

TEST(Sha256Test, KnownVector) {
  EXPECT_EQ(Sha256Hex(std::string("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace plexus
