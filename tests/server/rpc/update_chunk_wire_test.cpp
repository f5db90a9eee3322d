#include "server/rpc/update_chunk_wire.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "plexus/v1/federation.pb.h"
#include "proto/length_delimited_field.h"

namespace plexus {
namespace {

// Cuts bytes into pieces at random points (empty pieces included), as gRPC's slices may fall.
std::vector<std::string_view> Cut(const std::string& bytes, std::mt19937* rng) {
  std::vector<std::string_view> pieces;
  size_t at = 0;
  while (at < bytes.size()) {
    const size_t n = std::uniform_int_distribution<size_t>(0, 9)(*rng) == 0
                         ? 0
                         : std::uniform_int_distribution<size_t>(1, 1 + bytes.size() / 3)(*rng);
    pieces.push_back(std::string_view(bytes).substr(at, n));
    at += std::min(n, bytes.size() - at);
  }
  return pieces;
}

std::string Joined(const UpdateChunkView& v) {
  std::string out;
  for (std::string_view p : v.data) out.append(p);
  return out;
}

TEST(UpdateChunkWireTest, ReadsWhatProtobufWritesHoweverItIsCut) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    v1::UpdateChunk chunk;
    if (trial % 2 == 0) {
      v1::UpdateHeader* h = chunk.mutable_header();
      h->set_client_id("client-" + std::to_string(trial));
      h->set_task_id("task");
      h->set_base_version(trial);
      h->set_total_bytes(1u << 20);
      (*h->mutable_metrics())["loss"] = 0.5;
    } else {
      std::string data(std::uniform_int_distribution<size_t>(0, 3000)(rng), '\0');
      for (char& c : data) c = static_cast<char>(rng());
      chunk.set_data(data);
    }
    const std::string wire = chunk.SerializeAsString();
    Result<UpdateChunkView> view = ParseUpdateChunk(Cut(wire, &rng));
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    ASSERT_EQ(view->has_header, chunk.has_header());
    if (chunk.has_header()) {
      v1::UpdateHeader h;
      ASSERT_TRUE(h.ParseFromString(view->header));
      EXPECT_EQ(h.SerializeAsString(), chunk.header().SerializeAsString());
    } else {
      EXPECT_EQ(Joined(*view), chunk.data());
      EXPECT_EQ(view->data_bytes, chunk.data().size());
    }
  }
}

// The raw transfers write a field header and the data behind it: the same bytes as protobuf.
TEST(UpdateChunkWireTest, LengthDelimitedFieldHeaderWritesWhatProtobufWrites) {
  for (size_t n : {0, 1, 127, 128, 300, 16383, 16384, 1 << 20}) {
    const std::string data(n, 'x');
    v1::UpdateChunk update;
    update.set_data(data);
    EXPECT_EQ(LengthDelimitedFieldHeader(2, n) + data, update.SerializeAsString()) << n;
    v1::ModelChunk model;
    model.set_data(data);
    if (n > 0) {  // proto3 omits empty
      EXPECT_EQ(LengthDelimitedFieldHeader(4, n) + data, model.SerializeAsString()) << n;
    }
  }
  EXPECT_EQ(LengthDelimitedFieldHeader(16, 1), std::string("\x82\x01\x01", 3));  // a tag past one byte
}

TEST(UpdateChunkWireTest, SkipsUnknownFieldsAsProtobufDoes) {
  v1::UpdateChunk chunk;
  chunk.set_data("abc");
  // Field 15 as a varint, field 16 as 64-bit, field 17 as length-delimited, field 18 as 32-bit.
  const std::string wire = std::string("\x78\x96\x01", 3) + std::string("\x81\x01", 2) + std::string(8, 'x') +
                           std::string("\x8a\x01\x02hi", 5) + chunk.SerializeAsString() + std::string("\x95\x01", 2) +
                           std::string(4, 'y');
  v1::UpdateChunk reference;
  ASSERT_TRUE(reference.ParseFromString(wire));
  ASSERT_EQ(reference.data(), "abc");
  const std::string_view whole(wire);
  Result<UpdateChunkView> view = ParseUpdateChunk(std::span<const std::string_view>(&whole, 1));
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ(Joined(*view), "abc");
}

TEST(UpdateChunkWireTest, RefusesMalformedChunksNamingTheFault) {
  const auto parse = [](const std::string& wire) {
    const std::string_view whole(wire);
    return ParseUpdateChunk(std::span<const std::string_view>(&whole, 1));
  };
  struct Case {
    std::string wire, message;
  };
  const std::vector<Case> cases = {
      {"", "neither a header nor data"},
      {std::string("\x12\x05"
                   "abc",
                   5),
       "longer than the message"},
      {std::string("\x12\xff", 2), "truncated length"},
      {std::string("\x12\x01"
                   "a"
                   "\x12\x01"
                   "b",
                   6),
       "more than one part"},
      {std::string("\x0a\x00\x12\x00", 4), "more than one part"},
      {std::string("\x10\x01", 2), "field 2 has wire type 0"},
      {std::string("\x13", 1), "wire type 3"},
      {std::string("\x00\x01", 2), "field number 0"},
      {std::string(11, '\xff'), "truncated field tag"},
  };
  for (const Case& c : cases) {
    Result<UpdateChunkView> view = parse(c.wire);
    ASSERT_FALSE(view.ok()) << c.message;
    EXPECT_EQ(view.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(view.status().message().find(c.message), std::string::npos) << view.status().message();
  }
}

}  // namespace
}  // namespace plexus
