#include "compression/coded_downloads.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/rng.h"
#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

ModelState Model(uint64_t version, uint64_t seed, float scale) {
  ModelState m = *ModelState::Create({{"w", {300}}, {"b", {20}}}, version);
  Rng rng(seed);
  for (float& v : m.data()) v = static_cast<float>(rng.Uniform() * 2 - 1) * scale;
  return m;
}

float MaxDifference(const ModelState& a, const ModelState& b) {
  float worst = 0;
  for (size_t i = 0; i < a.num_params(); ++i) worst = std::max(worst, std::abs(a.data()[i] - b.data()[i]));
  return worst;
}

TEST(CodedDownloadsTest, OnlyCodecsThatKeepEveryValueAreTaken) {
  for (const char* spec : {"f32", "fp16", "bf16", "int8", "int8:chunk=16"}) EXPECT_OK(CodedDownloads::Create(spec));
  for (const char* spec : {"topk:ratio=0.1", "terngrad", "qsgd"}) {
    EXPECT_THAT(CodedDownloads::Create(spec).status(), StatusIs(StatusCode::kInvalidArgument, "downloads take"));
  }
  EXPECT_THAT(CodedDownloads::Create("zip").status(), StatusIs(StatusCode::kInvalidArgument, "unknown codec"));
}

// A client that follows the versions rebuilds each from the change against its last one; its
// error stays that of one change (the codec's step on the change), instead of the whole model's
// step, and does not grow with the number of versions.
TEST(CodedDownloadsTest, ChangesAreTakenFromWhatTheClientRebuiltSoErrorsDoNotPileUp) {
  auto downloads = *CodedDownloads::Create("int8:chunk=32");
  ModelState truth = Model(0, 1, 1.0f);
  CodedDownloads::Download d = *downloads->For(truth, "");
  EXPECT_EQ(d.base_sha256, "");  // the whole model, for a client that holds nothing
  EXPECT_EQ(d.rebuilt->ContentSha256(), d.model_sha256);
  EXPECT_EQ(d.rebuilt->version(), 0u);
  const float whole_error = MaxDifference(*d.rebuilt, truth);
  EXPECT_GT(whole_error, 0.0f);
  EXPECT_LE(whole_error, 1.0f / 127 / 2 * 1.001f);
  std::string held = d.model_sha256;
  for (uint64_t v = 1; v <= 50; ++v) {
    ModelState next = Model(v, 100 + v, 0.001f);  // a small step from the previous version
    for (size_t i = 0; i < next.num_params(); ++i) next.data()[i] += truth.data()[i];
    truth = next;
    d = *downloads->For(truth, held);
    ASSERT_EQ(d.base_sha256, held) << v;
    EXPECT_EQ(d.rebuilt->ContentSha256(), d.model_sha256);
    // The change is about one step plus the last error: its int8 error is about 1/127 of that.
    EXPECT_LT(MaxDifference(*d.rebuilt, truth), whole_error / 10) << v;
    EXPECT_EQ(d.bytes->size(), (*MakeCodec("int8:chunk=32"))->EncodedSize(truth));
    held = d.model_sha256;
  }
}

TEST(CodedDownloadsTest, EncodingsAreKeptAndUnknownOrForgottenBasesGetTheWholeModel) {
  auto downloads = *CodedDownloads::Create("fp16", /*kept_models=*/2, /*kept_encodings=*/2);
  const ModelState v0 = Model(0, 1, 1.0f);
  const CodedDownloads::Download first = *downloads->For(v0, "");
  // The same question again: the same bytes, not encoded again.
  EXPECT_EQ(downloads->For(v0, "")->bytes.get(), first.bytes.get());
  EXPECT_EQ(downloads->Kept(0, "")->bytes.get(), first.bytes.get());
  EXPECT_FALSE(downloads->Kept(1, first.model_sha256).has_value());
  // A base this object never had a client rebuild: the whole model.
  const ModelState v1 = Model(1, 2, 1.0f);
  EXPECT_EQ(downloads->For(v1, v0.ContentSha256())->base_sha256, "");
  // Two newer rebuilt models push the first out: asking from it gives the whole model.
  ASSERT_TRUE(downloads->For(Model(2, 3, 1.0f), "").ok());
  ASSERT_TRUE(downloads->For(Model(3, 4, 1.0f), "").ok());
  EXPECT_EQ(downloads->For(Model(4, 5, 1.0f), first.model_sha256)->base_sha256, "");
  // A base of another layout is not used.
  auto other = *CodedDownloads::Create("fp16");
  const CodedDownloads::Download small = *other->For(*ModelState::Create({{"x", {3}}}), "");
  EXPECT_EQ(other->For(v0, small.model_sha256)->base_sha256, "");
}

}  // namespace
}  // namespace plexus
