#include "client/download_sink.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "core/safetensors.h"
#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

ModelState Model() {
  ModelState m = *ModelState::Create({{"a", {3}}, {"b", {2, 50}}});
  for (size_t i = 0; i < m.num_params(); ++i) m.data()[i] = 0.5f * static_cast<float>(i);
  return m;
}

TEST(ModelDownloadSinkTest, PiecesDecodeIntoTheModelAndAreHeardWithTheirOffsets) {
  const ModelState want = Model();
  const std::string bytes = EncodeSafetensors(want);
  std::vector<std::pair<uint64_t, size_t>> heard;
  ModelDownloadSink sink([&](uint64_t offset, std::string_view piece) { heard.emplace_back(offset, piece.size()); });
  // Pieces that split the header and the values anywhere.
  const std::vector<size_t> cuts = {0, 3, 11, 100, 101, 300, bytes.size()};
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    ASSERT_OK(sink.Append(std::string_view(bytes).substr(cuts[i], cuts[i + 1] - cuts[i]), bytes.size()));
    EXPECT_EQ(sink.received(), cuts[i + 1]);
  }
  ASSERT_EQ(heard.size(), cuts.size() - 1);
  for (size_t i = 0; i < heard.size(); ++i)
    EXPECT_EQ(heard[i], std::make_pair(uint64_t{cuts[i]}, cuts[i + 1] - cuts[i]));
  Result<ModelState> got = std::move(sink).Finish(want.ContentSha256());
  ASSERT_OK(got.status());
  EXPECT_EQ(*got, want);
  EXPECT_TRUE(got->checked_finite());  // checked as the values arrived
}

TEST(ModelDownloadSinkTest, KeptBytesAreDecodedWithTheFirstPiece) {
  const ModelState want = Model();
  const std::string bytes = EncodeSafetensors(want);
  ModelDownloadSink sink;
  sink.Prefill(bytes.substr(0, 250));
  EXPECT_EQ(sink.received(), 250u);  // where the download resumes
  ASSERT_OK(sink.Append(std::string_view(bytes).substr(250), bytes.size()));
  EXPECT_EQ(*std::move(sink).Finish(want.ContentSha256()), want);
}

TEST(ModelDownloadSinkTest, BytesThatCannotBeTheModelAreDataLoss) {
  const ModelState want = Model();
  const std::string bytes = EncodeSafetensors(want);
  {
    ModelDownloadSink sink;  // not safetensors
    EXPECT_THAT(sink.Append(std::string(bytes.size(), '\xff'), bytes.size()), StatusIs(StatusCode::kDataLoss, ""));
  }
  {
    ModelDownloadSink sink;  // past the announced size
    ASSERT_OK(sink.Append(std::string_view(bytes).substr(0, 10), bytes.size()));
    EXPECT_THAT(sink.Append(std::string_view(bytes).substr(10), bytes.size() - 1),
                StatusIs(StatusCode::kDataLoss, "announced size changed"));
    EXPECT_THAT(sink.Append(bytes + "x", bytes.size()), StatusIs(StatusCode::kDataLoss, "more bytes than announced"));
  }
  {
    ModelDownloadSink sink;  // kept bytes longer than the model
    sink.Prefill(bytes + bytes);
    EXPECT_THAT(sink.Append("", bytes.size()), StatusIs(StatusCode::kDataLoss, "kept are more than the model"));
    sink.Reset();  // starts over from byte 0
    EXPECT_EQ(sink.received(), 0u);
    ASSERT_OK(sink.Append(bytes, bytes.size()));
    EXPECT_EQ(*std::move(sink).Finish(want.ContentSha256()), want);
  }
  {
    ModelDownloadSink sink;  // ended early
    ASSERT_OK(sink.Append(std::string_view(bytes).substr(0, bytes.size() - 4), bytes.size()));
    EXPECT_THAT(std::move(sink).Finish(), StatusIs(StatusCode::kDataLoss, "ended after"));
  }
  {
    ModelDownloadSink sink;  // another model than the task's
    ModelState other = want;
    other.data()[7] = 1.0f;
    const std::string other_bytes = EncodeSafetensors(other);
    ASSERT_OK(sink.Append(other_bytes, other_bytes.size()));
    EXPECT_THAT(std::move(sink).Finish(want.ContentSha256()), StatusIs(StatusCode::kDataLoss, "SHA-256"));
  }
  EXPECT_THAT(ModelDownloadSink().Finish(), StatusIs(StatusCode::kDataLoss, "no bytes"));
}

TEST(ModelDownloadSinkTest, ATaskNamingTheChecksumHasTheDownloadCheckedAgainstIt) {
  const ModelState want = Model();
  const std::string bytes = EncodeSafetensors(want);
  ModelState other = want;
  other.data()[7] = 1.0f;
  const std::string other_bytes = EncodeSafetensors(other);
  {
    ModelDownloadSink sink;
    ASSERT_OK(sink.Append(bytes, bytes.size()));
    EXPECT_EQ(*std::move(sink).Finish(want.ContentSha256(), want.ContentCrc32c()), want);
  }
  {
    ModelDownloadSink sink;  // another model than the task's: its checksum differs
    ASSERT_OK(sink.Append(other_bytes, other_bytes.size()));
    EXPECT_THAT(std::move(sink).Finish(want.ContentSha256(), want.ContentCrc32c()),
                StatusIs(StatusCode::kDataLoss, "CRC-32C"));
  }
  {
    ModelDownloadSink sink;  // resumed: the bytes kept from an interrupted download are checked too
    sink.Prefill(bytes.substr(0, bytes.size() / 2));
    ASSERT_OK(sink.Append(std::string_view(bytes).substr(bytes.size() / 2), bytes.size()));
    EXPECT_EQ(*std::move(sink).Finish(want.ContentSha256(), want.ContentCrc32c()), want);
  }
  {
    ModelDownloadSink sink;  // kept bytes of another model, the rest of this one
    sink.Prefill(other_bytes.substr(0, other_bytes.size() / 2));
    ASSERT_OK(sink.Append(std::string_view(bytes).substr(bytes.size() / 2), bytes.size()));
    EXPECT_THAT(std::move(sink).Finish(want.ContentSha256(), want.ContentCrc32c()),
                StatusIs(StatusCode::kDataLoss, "CRC-32C"));
  }
  {
    // With the checksum named, it is what is compared: the hash is not computed again (a task's
    // hash that the bytes do not have goes unnoticed here; the checksum is the check).
    ModelDownloadSink sink;
    ASSERT_OK(sink.Append(other_bytes, other_bytes.size()));
    EXPECT_EQ(*std::move(sink).Finish(want.ContentSha256(), other.ContentCrc32c()), other);
  }
}

TEST(StringDownloadSinkTest, KeepsTheBytesWholeWithinTheAnnouncedSize) {
  std::string bytes = "ab";  // a resumed download
  StringDownloadSink sink(&bytes);
  EXPECT_EQ(sink.received(), 2u);
  ASSERT_OK(sink.Append("cd", 6));
  EXPECT_EQ(sink.total(), 6u);
  EXPECT_THAT(sink.Append("ef", 7), StatusIs(StatusCode::kDataLoss, "announced size changed"));
  EXPECT_THAT(sink.Append("efg", 6), StatusIs(StatusCode::kDataLoss, "more bytes than announced"));
  ASSERT_OK(sink.Append("ef", 6));
  EXPECT_EQ(bytes, "abcdef");
}

}  // namespace
}  // namespace plexus
