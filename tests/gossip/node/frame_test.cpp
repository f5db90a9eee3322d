#include "gossip/node/frame.h"

#include <gtest/gtest.h>

#include "core/model_state.h"
#include "tests/testing/status_matchers.h"

namespace plexus::gossip {
namespace {

using ::plexus::testing::StatusIs;

TEST(FrameReader, CutsFramesWhateverTheReadBoundaries) {
  std::string wire = EncodeFrame(FrameType::kMessage, 0, 0, "hello") + EncodeFrame(FrameType::kChunk, 7, 3, "abc") +
                     EncodeFrame(FrameType::kChunk, 7, 4, "");
  for (size_t step = 1; step <= wire.size(); ++step) {
    FrameReader reader(1024);
    std::vector<Frame> frames;
    for (size_t i = 0; i < wire.size(); i += step) ASSERT_OK(reader.Append(wire.substr(i, step), &frames));
    ASSERT_EQ(frames.size(), 3u) << "step " << step;
    EXPECT_EQ(frames[0].type, FrameType::kMessage);
    EXPECT_EQ(frames[0].payload, "hello");
    EXPECT_EQ(frames[1].type, FrameType::kChunk);
    EXPECT_EQ(frames[1].stream, 7u);
    EXPECT_EQ(frames[1].index, 3u);
    EXPECT_EQ(frames[1].payload, "abc");
    EXPECT_EQ(frames[2].index, 4u);
    EXPECT_EQ(frames[2].payload, "");
    EXPECT_EQ(reader.buffered(), 0u);
  }
}

TEST(FrameReader, RefusesAnOversizedLengthBeforeBufferingIt) {
  FrameReader reader(100);
  std::vector<Frame> frames;
  // A length prefix of 4 GiB - 1 arrives alone: refused at once, nothing waits for the payload.
  EXPECT_THAT(reader.Append(std::string("\xff\xff\xff\xff", 4), &frames),
              StatusIs(StatusCode::kInvalidArgument, "frame length"));
  EXPECT_TRUE(frames.empty());
  EXPECT_EQ(reader.buffered(), 0u);
  FrameReader exact(3);
  EXPECT_OK(exact.Append(EncodeFrame(FrameType::kChunk, 1, 0, "abc"), &frames));
  EXPECT_THAT(exact.Append(EncodeFrame(FrameType::kChunk, 1, 1, "abcd"), &frames),
              StatusIs(StatusCode::kInvalidArgument, "frame length"));
}

TEST(FrameReader, RefusesUnknownTypesAndShortLengths) {
  FrameReader reader(100);
  std::vector<Frame> frames;
  std::string bad = EncodeFrame(FrameType::kChunk, 1, 0, "x");
  bad[4] = 9;
  EXPECT_THAT(reader.Append(bad, &frames), StatusIs(StatusCode::kInvalidArgument, "unknown frame type 9"));
  FrameReader short_length(100);
  EXPECT_THAT(short_length.Append(std::string("\x02\x00\x00\x00\x01\x00", 6), &frames),
              StatusIs(StatusCode::kInvalidArgument, "frame length 2"));
}

TEST(ModelAssembler, ChecksOrderSizeAndHash) {
  const std::string model = "0123456789";
  auto a = ModelAssembler::Begin(model.size(), Sha256Hex(model), 100);
  ASSERT_OK(a);
  EXPECT_THAT(a->Add(1, "0123"), StatusIs(StatusCode::kInvalidArgument, "chunk 1 where 0 was due"));
  ASSERT_OK(a->Add(0, "0123"));
  EXPECT_FALSE(a->complete());
  EXPECT_THAT(a->Add(1, "45678901234"), StatusIs(StatusCode::kInvalidArgument, "past the announced"));
  ASSERT_OK(a->Add(1, "456789"));
  ASSERT_TRUE(a->complete());
  auto bytes = std::move(*a).Finish();
  ASSERT_OK(bytes);
  EXPECT_EQ(*bytes, model);

  auto tampered = ModelAssembler::Begin(model.size(), Sha256Hex(model), 100);
  ASSERT_OK(tampered);
  ASSERT_OK(tampered->Add(0, "0123456780"));
  EXPECT_THAT(std::move(*tampered).Finish(), StatusIs(StatusCode::kDataLoss, "SHA-256"));
}

TEST(ModelAssembler, RefusesSizesBeyondTheLimitAndMissingHashes) {
  EXPECT_THAT(ModelAssembler::Begin(101, Sha256Hex(std::string("x")), 100),
              StatusIs(StatusCode::kInvalidArgument, "outside [1, 100]"));
  EXPECT_THAT(ModelAssembler::Begin(0, Sha256Hex(std::string("x")), 100), StatusIs(StatusCode::kInvalidArgument, ""));
  EXPECT_THAT(ModelAssembler::Begin(10, "abc", 100), StatusIs(StatusCode::kInvalidArgument, "SHA-256"));
}

}  // namespace
}  // namespace plexus::gossip
