#include "core/model_state.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/crc32c.h"
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
  EXPECT_THAT(b.CheckSameLayout(a),
              StatusIs(StatusCode::kInvalidArgument, "tensor 'w' has shape [3, 2], expected [2, 3]"));
  ModelState c = *ModelState::Create({{"w", {2, 3}}});
  EXPECT_THAT(c.CheckSameLayout(a), StatusIs(StatusCode::kInvalidArgument, "1 tensors, expected 2"));
}

TEST(ModelStateTest, AllFiniteFindsEveryKindOfNonFiniteValueAtEveryPosition) {
  const float kinds[] = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                         std::numeric_limits<float>::signaling_NaN(), std::numeric_limits<float>::infinity(),
                         -std::numeric_limits<float>::infinity()};
  for (size_t n : {0, 1, 7, 8, 9, 15, 16, 17, 24, 33, 47}) {  // every loop (16, 8 and 1 wide) and its tail
    // Finite extremes pass: the largest, the smallest normal and subnormal, signed zeros.
    std::vector<float> v(n, std::numeric_limits<float>::max());
    if (n > 1) v[1] = -std::numeric_limits<float>::denorm_min();
    if (n > 2) v[2] = std::numeric_limits<float>::min();
    if (n > 3) v[3] = -0.0f;
    EXPECT_TRUE(AllFinite(v)) << n;
    for (size_t at = 0; at < n; ++at) {
      for (float bad : kinds) {
        std::vector<float> w = v;
        w[at] = bad;
        EXPECT_FALSE(AllFinite(w)) << n << " " << at << " " << bad;
      }
    }
  }
}

TEST(ModelStateTest, ScaleMultipliesEveryValueExactlyAsFloatsDo) {
  for (size_t n : {1, 7, 8, 9, 33}) {
    ModelState m = *ModelState::Create({{"w", {static_cast<int64_t>(n)}}});
    for (size_t i = 0; i < n; ++i) m.data()[i] = 0.1f * static_cast<float>(i) - 1.3f;
    const ModelState before = m;
    m.Scale(0.37f);
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(m.data()[i], before.data()[i] * 0.37f) << n << " " << i;
  }
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

// The content encoding spelled out: the tensor count, each name (length first) and shape (rank
// first) as little-endian uint64, then the values' bytes.
std::string ContentEncoding(const ModelState& m) {
  std::string e;
  auto u64 = [&e](uint64_t v) {
    for (int i = 0; i < 8; ++i) e.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  u64(m.tensors().size());
  for (const TensorSlot& t : m.tensors()) {
    u64(t.name.size());
    e += t.name;
    u64(t.shape.size());
    for (int64_t d : t.shape) u64(static_cast<uint64_t>(d));
  }
  e.append(reinterpret_cast<const char*>(m.data().data()), m.num_bytes());
  return e;
}

TEST(ModelStateTest, HashAndChecksumAreOfTheContentEncodingAndOnePassGivesBoth) {
  // 300,000 values: the one pass (ModelState::Digests) goes over them in several pieces.
  ModelState m = *ModelState::Create({{"layer.weight", {300, 1000}}, {"layer.bias", {7}}});
  for (size_t i = 0; i < m.num_params(); ++i) m.data()[i] = 0.001f * static_cast<float>(i % 977);
  const std::string encoding = ContentEncoding(m);
  EXPECT_EQ(m.ContentSha256(), Sha256Hex(encoding));
  EXPECT_EQ(m.ContentCrc32c(), Crc32c(encoding));
  const ModelState::ContentDigests both = m.Digests();
  EXPECT_EQ(both.sha256, m.ContentSha256());
  EXPECT_EQ(both.crc32c, m.ContentCrc32c());
  // The checksum moves with a value, a name and a shape, as the hash does, but not the version.
  ModelState changed = m;
  changed.data()[123456] = 5.0f;
  EXPECT_NE(changed.ContentCrc32c(), m.ContentCrc32c());
  ModelState renamed = *ModelState::Create({{"layer.weighs", {300, 1000}}, {"layer.bias", {7}}});
  ModelState reshaped = *ModelState::Create({{"layer.weight", {1000, 300}}, {"layer.bias", {7}}});
  EXPECT_NE(renamed.ContentCrc32c(), reshaped.ContentCrc32c());
  EXPECT_NE(ModelState::ZerosLike(m).ContentCrc32c(), renamed.ContentCrc32c());
  changed = m;
  changed.set_version(4);
  EXPECT_EQ(changed.Digests().crc32c, both.crc32c);
}

TEST(ModelStateTest, CopiesCarryLayoutValuesVersionAndTheFiniteCheck) {
  ModelState small = TwoTensors();
  for (size_t i = 0; i < small.num_params(); ++i) small.data()[i] = 0.5f * static_cast<float>(i);
  small.set_version(7);
  small.MarkCheckedFinite();
  // A million parameters: a large block, so that copy-assignment between sizes changes blocks.
  ModelState large = *ModelState::Create({{"big", {1000, 1000}}}, 3);
  large.data()[999999] = -2.0f;

  ModelState copy(small);
  EXPECT_EQ(copy, small);
  EXPECT_TRUE(copy.checked_finite());
  EXPECT_NE(std::as_const(copy).data().data(), std::as_const(small).data().data());  // const: no write

  ModelState target = large;  // assigned a smaller model, then a larger one, then itself
  EXPECT_EQ(target, large);
  EXPECT_FALSE(target.checked_finite());
  target = small;
  EXPECT_EQ(target, small);
  EXPECT_TRUE(target.checked_finite());
  target = large;
  EXPECT_EQ(target, large);
  EXPECT_EQ(target.data()[999999], -2.0f);
  const ModelState& same = target;
  target = same;
  EXPECT_EQ(target, large);
  target = ModelState();
  EXPECT_EQ(target.num_params(), 0u);
  EXPECT_EQ(ModelState(target).num_params(), 0u);
}

TEST(Sha256Test, KnownVector) {
  EXPECT_EQ(Sha256Hex(std::string("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace plexus
