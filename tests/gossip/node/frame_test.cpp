#include "gossip/node/frame.h"

#include <gtest/gtest.h>

#include "core/model_state.h"
#include "core/safetensors.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/vector_model.h"

namespace plexus::gossip {
namespace {

using ::plexus::testing::StatusIs;
using ::plexus::testing::VectorModel;

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

// Issue 38: another protocol on a peer's link is named, not reported as a frame length.
TEST(FrameReader, NamesTheProtocolThatReachedAPeerPort) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {std::string("\x00\x00\x18\x04\x00\x00\x00\x00\x00", 9), "a plexus server's, not a plexus peer's"},
      {"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "a gRPC client"},
      {std::string("\x16\x03\x01\x02\x00\x01", 6), "speaks TLS"},
      {"GET / HTTP/1.1\r\n", "plain HTTP"},
  };
  for (const auto& [bytes, says] : cases) {
    FrameReader reader(1 << 20);
    std::vector<Frame> frames;
    EXPECT_THAT(reader.Append(bytes, &frames), StatusIs(StatusCode::kInvalidArgument, says)) << says;
  }
}

TEST(ModelAssembler, DecodesChunksInOrderAndChecksSizeAndHash) {
  const ModelState model = VectorModel({1, 2, 3, 4, 5, 6, 7, 8});
  const std::string bytes = EncodeSafetensors(model);
  const size_t cut = bytes.size() - 10;  // the second chunk holds values only
  auto a = ModelAssembler::Begin(bytes.size(), Sha256Hex(bytes), 1 << 20);
  ASSERT_OK(a);
  EXPECT_THAT(a->Add(1, bytes.substr(0, cut)), StatusIs(StatusCode::kInvalidArgument, "chunk 1 where 0 was due"));
  ASSERT_OK(a->Add(0, bytes.substr(0, cut)));
  EXPECT_FALSE(a->complete());
  EXPECT_THAT(a->Add(1, bytes.substr(cut) + "x"), StatusIs(StatusCode::kInvalidArgument, "past the announced"));
  ASSERT_OK(a->Add(1, bytes.substr(cut)));
  ASSERT_TRUE(a->complete());
  auto decoded = std::move(*a).Finish();
  ASSERT_OK(decoded);
  EXPECT_EQ(decoded->ContentSha256(), model.ContentSha256());

  // One value changed on the way: the hash of the whole gives it away.
  std::string tampered = bytes;
  tampered.back() ^= 1;
  auto t = ModelAssembler::Begin(bytes.size(), Sha256Hex(bytes), 1 << 20);
  ASSERT_OK(t);
  ASSERT_OK(t->Add(0, tampered));
  EXPECT_THAT(std::move(*t).Finish(), StatusIs(StatusCode::kDataLoss, "SHA-256"));

  // Bytes that are not safetensors are refused as they come.
  const std::string junk(64, '\xff');
  auto j = ModelAssembler::Begin(junk.size(), Sha256Hex(junk), 1 << 20);
  ASSERT_OK(j);
  EXPECT_THAT(j->Add(0, junk), StatusIs(StatusCode::kInvalidArgument, ""));
}

TEST(FrameReader, HandsWholeFramesOverInPlaceAndGathersSplitOnes) {
  const std::string a = EncodeFrame(FrameType::kChunk, 1, 0, std::string(100, 'a'));
  const std::string b = EncodeFrame(FrameType::kChunk, 1, 1, std::string(100, 'b'));
  const std::string read1 = a + b.substr(0, 50);
  FrameReader reader(1024);
  std::vector<const char*> where;
  ASSERT_OK(reader.Read(read1, [&](const FrameView& v) {
    where.push_back(v.payload.data());
    return true;
  }));
  ASSERT_EQ(where.size(), 1u);
  EXPECT_EQ(where[0], read1.data() + kFrameHeaderBytes);  // no copy
  EXPECT_EQ(reader.buffered(), 50u);
  std::string second;
  ASSERT_OK(reader.Read(b.substr(50), [&](const FrameView& v) {
    second = std::string(v.payload);
    return true;
  }));
  EXPECT_EQ(second, std::string(100, 'b'));
  // A callback that stops: the frames after it are not handed over.
  FrameReader stopper(1024);
  int seen = 0;
  ASSERT_OK(stopper.Read(a + b, [&](const FrameView&) { return ++seen < 1; }));
  EXPECT_EQ(seen, 1);
}

// Compressed gossip: a codec's bytes are kept whole and checked against their hash.
TEST(ModelAssembler, KeepsAByteStreamWholeAndChecksItsHash) {
  const std::string bytes = "any codec's bytes, not safetensors";
  auto a = ModelAssembler::BeginBytes(bytes.size(), Sha256Hex(bytes), 1 << 20);
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->bytes_stream());
  ASSERT_TRUE(a->Add(0, std::string_view(bytes).substr(0, 10)).ok());
  EXPECT_FALSE(a->complete());
  ASSERT_TRUE(a->Add(1, std::string_view(bytes).substr(10)).ok());
  ASSERT_TRUE(a->complete());
  Result<std::string> got = std::move(*a).FinishBytes();
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, bytes);

  auto altered = ModelAssembler::BeginBytes(bytes.size(), Sha256Hex(bytes), 1 << 20);
  ASSERT_TRUE(altered->Add(0, std::string(bytes.size(), 'x')).ok());
  EXPECT_EQ(std::move(*altered).FinishBytes().status().code(), StatusCode::kDataLoss);
  auto too_long = ModelAssembler::BeginBytes(bytes.size(), Sha256Hex(bytes), 1 << 20);
  EXPECT_FALSE(too_long->Add(0, bytes + "!").ok());
  EXPECT_FALSE(ModelAssembler::BeginBytes(2 << 20, Sha256Hex(bytes), 1 << 20).ok());  // beyond the limit
}

// A plaintext link's chunks carry a CRC-32C of type, stream, index and bytes: handed over without
// it once it matches; any one flipped byte (in the bytes, the index or the CRC itself) is DataLoss.
TEST(FrameReader, ChecksEveryCheckedChunkAndCatchesAFlippedByte) {
  const std::string bytes = "model bytes on a plaintext link";
  const std::string frame = EncodeCheckedChunk(7, 3, bytes);
  ASSERT_EQ(frame.size(), kFrameHeaderBytes + bytes.size() + kChunkCrcBytes);
  FrameReader reader(1024);
  std::vector<FrameView> seen;
  std::string payload;
  ASSERT_OK(reader.Read(frame, [&](const FrameView& v) {
    seen.push_back(v);
    payload = std::string(v.payload);
    return true;
  }));
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].type, FrameType::kChunk);
  EXPECT_TRUE(seen[0].checked);
  EXPECT_EQ(seen[0].stream, 7u);
  EXPECT_EQ(seen[0].index, 3u);
  EXPECT_EQ(payload, bytes);
  // The trailer computed from the pieces a sender writes from (header, prefix part, values).
  const std::string header = frame.substr(0, kFrameHeaderBytes);
  EXPECT_EQ(CheckedChunkTrailer(header, {bytes.substr(0, 5), bytes.substr(5)}), frame.substr(frame.size() - 4));

  for (size_t at : {size_t{9}, kFrameHeaderBytes, kFrameHeaderBytes + 10, frame.size() - 1}) {
    std::string altered = frame;
    altered[at] = static_cast<char>(altered[at] ^ 0x10);
    FrameReader r(1024);
    int handed = 0;
    EXPECT_THAT(r.Read(altered,
                       [&](const FrameView&) {
                         ++handed;
                         return true;
                       }),
                StatusIs(StatusCode::kDataLoss, "CRC-32C"))
        << "byte " << at;
    EXPECT_EQ(handed, 0) << "byte " << at;
  }
  // Too short to hold a CRC.
  FrameReader r(1024);
  EXPECT_THAT(r.Read(EncodeFrame(FrameType::kCheckedChunk, 1, 0, "ab"), [](const FrameView&) { return true; }),
              StatusIs(StatusCode::kInvalidArgument, "too short"));
}

// A stream its link vouches for: no hash announced, none computed; the size checks stay.
TEST(ModelAssembler, AnUnhashedStreamDecodesWithTheSameSizeChecks) {
  const ModelState model = VectorModel({1, 2, 3, 4});
  const std::string bytes = EncodeSafetensors(model);
  auto a = ModelAssembler::BeginUnhashed(bytes.size(), 1 << 20);
  ASSERT_OK(a);
  ASSERT_OK(a->Add(0, bytes));
  auto decoded = std::move(*a).Finish();
  ASSERT_OK(decoded);
  EXPECT_EQ(decoded->ContentSha256(), model.ContentSha256());
  EXPECT_THAT(ModelAssembler::BeginUnhashed(101, 100), StatusIs(StatusCode::kInvalidArgument, "outside [1, 100]"));
  EXPECT_THAT(ModelAssembler::BeginUnhashed(0, 100), StatusIs(StatusCode::kInvalidArgument, ""));
}

TEST(ModelAssembler, RefusesSizesBeyondTheLimitAndMissingHashes) {
  EXPECT_THAT(ModelAssembler::Begin(101, Sha256Hex(std::string("x")), 100),
              StatusIs(StatusCode::kInvalidArgument, "outside [1, 100]"));
  EXPECT_THAT(ModelAssembler::Begin(0, Sha256Hex(std::string("x")), 100), StatusIs(StatusCode::kInvalidArgument, ""));
  EXPECT_THAT(ModelAssembler::Begin(10, "abc", 100), StatusIs(StatusCode::kInvalidArgument, "SHA-256"));
}

}  // namespace
}  // namespace plexus::gossip
