#include "proto/model_chunk_view.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "plexus/v1/federation.pb.h"
#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

// Every way of cutting `bytes` in two, and random cuts into many pieces (empty ones included),
// as gRPC's slices may fall.
std::vector<std::vector<std::string_view>> Cuts(const std::string& bytes, std::mt19937* rng) {
  std::vector<std::vector<std::string_view>> cuts;
  const std::string_view all(bytes);
  for (size_t at = 0; at <= bytes.size(); ++at) cuts.push_back({all.substr(0, at), all.substr(at)});
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<std::string_view> pieces;
    size_t at = 0;
    while (at < bytes.size()) {
      const size_t n = std::uniform_int_distribution<size_t>(0, 4)(*rng) == 0
                           ? 0
                           : std::uniform_int_distribution<size_t>(1, 1 + bytes.size() / 5)(*rng);
      pieces.push_back(all.substr(at, n));
      at += std::min(n, bytes.size() - at);
    }
    cuts.push_back(std::move(pieces));
  }
  return cuts;
}

std::string Joined(const ModelChunkView& v) {
  std::string out;
  for (std::string_view p : v.data) out.append(p);
  return out;
}

TEST(ModelChunkViewTest, ReadsWhatProtobufWritesHoweverItIsCutLeavingTheDataInPlace) {
  std::mt19937 rng(11);
  v1::ModelChunk chunk;
  chunk.set_version(300);  // two-byte varints
  chunk.set_total_bytes(uint64_t{1} << 40);
  chunk.set_offset(1048576);
  std::string data(700, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 31);
  chunk.set_data(data);
  const std::string bytes = chunk.SerializeAsString();
  for (const std::vector<std::string_view>& pieces : Cuts(bytes, &rng)) {
    ModelChunkView view;
    ASSERT_OK(ParseModelChunk(pieces, &view));
    EXPECT_EQ(view.version, 300u);
    EXPECT_EQ(view.total_bytes, uint64_t{1} << 40);
    EXPECT_EQ(view.offset, 1048576u);
    EXPECT_EQ(view.data_bytes, data.size());
    EXPECT_EQ(Joined(view), data);
    EXPECT_FALSE(view.describes_coding);
    for (std::string_view piece : view.data) {  // views into the pieces, not copies
      EXPECT_GE(piece.data(), bytes.data());
      EXPECT_LE(piece.data() + piece.size(), bytes.data() + bytes.size());
    }
  }
}

TEST(ModelChunkViewTest, NotesACodedDownloadsDescriptionAndSkipsUnknownFields) {
  v1::ModelChunk chunk;
  chunk.set_version(2);
  chunk.set_data("abc");
  chunk.set_codec("int8");
  chunk.set_model_sha256(std::string(64, 'f'));
  v1::TensorLayout* t = chunk.add_layout();
  t->set_name("w");
  t->add_shape(3);
  std::string bytes = chunk.SerializeAsString();
  // Fields from a later version of the message, in every wire type: skipped.
  bytes += std::string("\xc8\x01\x05", 3);                    // field 25, varint 5
  bytes += std::string("\xd1\x01", 2) + std::string(8, 'x');  // field 26, fixed64
  bytes += std::string("\xdd\x01", 2) + std::string(4, 'y');  // field 27, fixed32
  bytes += std::string("\xe2\x01\x02zz", 5);                  // field 28, two bytes
  const std::vector<std::string_view> pieces = {bytes};
  ModelChunkView view;
  ASSERT_OK(ParseModelChunk(pieces, &view));
  EXPECT_EQ(view.version, 2u);
  EXPECT_EQ(Joined(view), "abc");
  EXPECT_TRUE(view.describes_coding);
  // A later data field replaces an earlier one, as protobuf's parser has it.
  v1::ModelChunk second;
  second.set_data("later");
  const std::string twice = bytes + second.SerializeAsString();
  const std::vector<std::string_view> both = {twice};
  ASSERT_OK(ParseModelChunk(both, &view));
  EXPECT_EQ(Joined(view), "later");
  v1::ModelChunk parsed;
  ASSERT_TRUE(parsed.ParseFromString(twice));
  EXPECT_EQ(parsed.data(), "later");
}

TEST(ModelChunkViewTest, RefusesBytesThatAreNotAModelChunk) {
  v1::ModelChunk chunk;
  chunk.set_version(1);
  chunk.set_data(std::string(50, 'd'));
  const std::string bytes = chunk.SerializeAsString();
  auto parse = [](const std::string& b) {
    const std::vector<std::string_view> pieces = {b};
    ModelChunkView view;
    return ParseModelChunk(pieces, &view);
  };
  EXPECT_THAT(parse(bytes.substr(0, bytes.size() - 1)), StatusIs(StatusCode::kDataLoss, "field 4 longer"));
  EXPECT_THAT(parse(bytes.substr(0, 1)), StatusIs(StatusCode::kDataLoss, "truncated varint in field 1"));
  EXPECT_THAT(parse(std::string("\x08\x80", 2)), StatusIs(StatusCode::kDataLoss, "truncated varint"));
  EXPECT_THAT(parse(std::string("\x08") + std::string(11, '\x80')), StatusIs(StatusCode::kDataLoss, "varint"));
  EXPECT_THAT(parse(std::string("\x0b", 1)), StatusIs(StatusCode::kDataLoss, "wire type 3 in field 1"));  // a group
  EXPECT_THAT(parse(std::string("\x22\x01", 2)), StatusIs(StatusCode::kDataLoss, "field 4 longer"));
  EXPECT_THAT(parse(std::string("\x20\x01", 2)), StatusIs(StatusCode::kDataLoss, "wire type 0 in field 4"));
  EXPECT_THAT(parse(std::string("\x00\x01", 2)), StatusIs(StatusCode::kDataLoss, "field number 0"));
  EXPECT_THAT(parse(std::string("\xd1\x01xx", 4)), StatusIs(StatusCode::kDataLoss, "in field 26"));
  ModelChunkView empty;
  EXPECT_OK(ParseModelChunk({}, &empty));  // every field at its default, as protobuf reads it
  EXPECT_EQ(empty.data_bytes, 0u);
}

}  // namespace
}  // namespace plexus
