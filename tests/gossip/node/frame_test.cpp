#include "gossip/node/frame.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <span>

#include "core/crc32c.h"
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
  // And from the CRC of the bytes alone, as a chunk sent on several links is.
  EXPECT_EQ(CheckedChunkTrailerOfCrc(header, Crc32c(bytes), bytes.size()), frame.substr(frame.size() - 4));

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

// What a plaintext link does (peer_links.cpp): the model's chunks go straight into the model. A
// link reading its own way: into the reader's PlacedTarget() while it offers one, else at most
// ReadLimit() bytes (and at most `step`) handed to Read. Returns the frames seen (placed ones as
// their payload's bytes) and how many bytes were read in place.
struct LinkRun {
  std::vector<Frame> frames;
  std::vector<bool> placed;
  std::vector<size_t> in_place;  // of each frame's bytes, how many were read in place
  size_t read_in_place = 0;
  Status status = Status::Ok();
};
LinkRun ReadLikeALink(FrameReader* reader, std::string_view wire, size_t step) {
  LinkRun run;
  size_t since_last_frame = 0;  // a chunk's body is read in place after the frame before it
  auto on_frame = [&](const FrameView& v) {
    run.frames.push_back({v.type, v.stream, v.index, std::string(v.payload)});
    run.placed.push_back(v.placed);
    run.in_place.push_back(since_last_frame);
    since_last_frame = 0;
    return true;
  };
  size_t at = 0;
  while (at < wire.size() && run.status.ok()) {
    const std::span<char> place = reader->PlacedTarget();
    if (!place.empty()) {
      const size_t n = std::min({place.size(), step, wire.size() - at});
      std::memcpy(place.data(), wire.data() + at, n);  // the kernel's copy
      reader->Placed(n);
      run.read_in_place += n;
      since_last_frame += n;
      at += n;
      continue;
    }
    const size_t n = std::min({reader->ReadLimit(), step, wire.size() - at});
    run.status = reader->Read(wire.substr(at, n), on_frame);
    at += n;
  }
  return run;
}

// A model's chunks read into the model itself: whatever the read boundaries, the same frames in the
// same order as gathering them, each placed chunk's payload the place its placer gave; once chunks
// are placed, every later body is read in place (the reads between bodies stop at the next body).
TEST(FrameReader, ReadsChunkBodiesIntoThePlaceTheirPlacerGives) {
  const std::string body1(3000, 'x'), body2(5000, 'y'), body3(700, 'z');
  const std::string wire = EncodeFrame(FrameType::kMessage, 0, 0, "announce") + EncodeCheckedChunk(4, 0, body1) +
                           EncodeCheckedChunk(4, 1, body2) + EncodeFrame(FrameType::kMessage, 0, 0, "between") +
                           EncodeCheckedChunk(4, 2, body3) + EncodeFrame(FrameType::kChunk, 4, 3, body3);
  for (size_t step : {size_t{1}, size_t{7}, size_t{13}, size_t{17}, size_t{1000}, size_t{4096}, wire.size()}) {
    std::string model(body1.size() + body2.size() + 2 * body3.size(), '\0');
    size_t next = 0;  // where the next chunk goes
    int asked = 0;
    FrameReader reader(1 << 20);
    reader.set_placer([&](uint32_t stream, uint32_t index, size_t bytes) {
      ++asked;
      EXPECT_EQ(stream, 4u);
      std::span<char> place(model.data() + next, bytes);
      next += bytes;
      (void)index;
      return place;
    });
    LinkRun run = ReadLikeALink(&reader, wire, step);
    ASSERT_OK(run.status) << "step " << step;
    ASSERT_EQ(run.frames.size(), 6u) << "step " << step;
    EXPECT_EQ(run.frames[0].payload, "announce");
    EXPECT_EQ(run.frames[1].payload, body1);
    EXPECT_EQ(run.frames[2].payload, body2);
    EXPECT_EQ(run.frames[3].payload, "between");
    EXPECT_EQ(run.frames[4].payload, body3);
    EXPECT_EQ(run.frames[5].payload, body3);
    for (size_t i : {1, 2, 4, 5}) {
      EXPECT_EQ(run.frames[i].type, FrameType::kChunk);
      EXPECT_EQ(run.frames[i].index, i < 3 ? i - 1 : i - 2);
    }
    EXPECT_EQ(reader.buffered(), 0u);
    EXPECT_TRUE(reader.PlacedTarget().empty());
    if (step < wire.size()) {
      EXPECT_GE(asked, 1) << "step " << step;
      EXPECT_TRUE(run.placed[2]) << "step " << step;
      // After a placed chunk the reads stop at frame boundaries: all of the next checked chunks'
      // bodies are then read in place, a message between them or not. No more than the checked
      // chunks' bodies ever is.
      if (run.placed[1]) {
        EXPECT_EQ(run.in_place[2], body2.size()) << "step " << step;
        EXPECT_EQ(run.in_place[4], body3.size()) << "step " << step;
      }
      EXPECT_EQ(run.placed[1], step < 4096) << "step " << step;
      EXPECT_LE(run.read_in_place, body1.size() + body2.size() + body3.size()) << "step " << step;
    } else {
      EXPECT_EQ(asked, 0);  // all in one read: handed over where it lies
      EXPECT_EQ(run.read_in_place, 0u);
    }
  }
}

// A placed chunk's CRC-32C is checked once its body is in: a flipped byte in the body (read in
// place) or in its CRC is DataLoss, and the chunk is not handed over; a placer that gives no place
// leaves the chunk to be gathered as before.
TEST(FrameReader, APlacedChunkWithAFlippedByteIsRefusedAndAnUnplacedOneGathered) {
  const std::string body(4000, 'm');
  const std::string frame = EncodeCheckedChunk(9, 0, body);
  for (size_t at : {kFrameHeaderBytes + 100, frame.size() - 2}) {
    std::string altered = frame;
    altered[at] = static_cast<char>(altered[at] ^ 0x01);
    std::string model(body.size(), '\0');
    FrameReader reader(1 << 20);
    reader.set_placer([&](uint32_t, uint32_t, size_t bytes) { return std::span<char>(model.data(), bytes); });
    LinkRun run = ReadLikeALink(&reader, altered, 1024);
    EXPECT_THAT(run.status, StatusIs(StatusCode::kDataLoss, "CRC-32C")) << "byte " << at;
    EXPECT_TRUE(run.frames.empty()) << "byte " << at;
    EXPECT_GT(run.read_in_place, 0u) << "byte " << at;
  }
  FrameReader declining(1 << 20);
  int asked = 0;
  declining.set_placer([&](uint32_t, uint32_t, size_t) {
    ++asked;
    return std::span<char>();
  });
  LinkRun run = ReadLikeALink(&declining, frame, 1024);
  ASSERT_OK(run.status);
  ASSERT_EQ(run.frames.size(), 1u);
  EXPECT_EQ(run.frames[0].payload, body);
  EXPECT_FALSE(run.placed[0]);
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(run.read_in_place, 0u);
}

// The assembler gives a chunk a place only when it is the chunk due and holds values only; Add
// given that place takes the bytes where they lie, and the model decodes as if they were copied.
TEST(ModelAssembler, GivesTheDueValuesChunkItsPlaceInTheModel) {
  const ModelState model = VectorModel({1, 2, 3, 4, 5, 6, 7, 8});
  const std::string bytes = EncodeSafetensors(model);
  const size_t cut = bytes.size() - 16;  // the last four values
  auto a = ModelAssembler::BeginUnhashed(bytes.size(), 1 << 20);
  ASSERT_OK(a);
  EXPECT_TRUE(a->Destination(0, cut).empty());  // the header is not in yet
  ASSERT_OK(a->Add(0, bytes.substr(0, cut)));
  EXPECT_TRUE(a->Destination(2, 16).empty());  // not the chunk due
  EXPECT_TRUE(a->Destination(1, 17).empty());  // past the announced size
  std::span<char> place = a->Destination(1, 16);
  ASSERT_EQ(place.size(), 16u);
  std::memcpy(place.data(), bytes.data() + cut, 16);
  ASSERT_OK(a->Add(1, std::string_view(place.data(), place.size())));
  ASSERT_TRUE(a->complete());
  auto decoded = std::move(*a).Finish();
  ASSERT_OK(decoded);
  EXPECT_EQ(decoded->ContentSha256(), model.ContentSha256());
  EXPECT_TRUE(decoded->checked_finite());
  // A NaN read in place is seen as one copied would be.
  std::string with_nan = bytes;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(with_nan.data() + bytes.size() - 4, &nan, 4);
  auto b = ModelAssembler::BeginUnhashed(bytes.size(), 1 << 20);
  ASSERT_OK(b->Add(0, with_nan.substr(0, cut)));
  std::span<char> p = b->Destination(1, 16);
  ASSERT_EQ(p.size(), 16u);
  std::memcpy(p.data(), with_nan.data() + cut, 16);
  ASSERT_OK(b->Add(1, std::string_view(p.data(), p.size())));
  auto nan_model = std::move(*b).Finish();
  ASSERT_OK(nan_model);
  EXPECT_FALSE(nan_model->checked_finite());
  // A bytes stream (a codec's) is kept whole, never placed.
  auto c = ModelAssembler::BeginBytes(bytes.size(), "", 1 << 20);
  ASSERT_OK(c);
  ASSERT_OK(c->Add(0, bytes.substr(0, cut)));
  EXPECT_TRUE(c->Destination(1, 16).empty());
}

}  // namespace
}  // namespace plexus::gossip
