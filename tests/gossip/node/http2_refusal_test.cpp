#include "gossip/node/http2_refusal.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace plexus::gossip {
namespace {

struct H2Frame {
  uint8_t type = 0, flags = 0;
  uint32_t stream = 0;
  std::string payload;
};

std::string Header(uint32_t length, uint8_t type, uint8_t flags, uint32_t stream) {
  return {static_cast<char>(length >> 16), static_cast<char>(length >> 8), static_cast<char>(length),
          static_cast<char>(type),         static_cast<char>(flags),       static_cast<char>(stream >> 24),
          static_cast<char>(stream >> 16), static_cast<char>(stream >> 8), static_cast<char>(stream)};
}

std::vector<H2Frame> Frames(const std::string& bytes) {
  std::vector<H2Frame> out;
  for (size_t pos = 0; pos + 9 <= bytes.size();) {
    auto u = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(bytes[pos + i])); };
    const uint32_t length = (u(0) << 16) | (u(1) << 8) | u(2);
    out.push_back({static_cast<uint8_t>(u(3)), static_cast<uint8_t>(u(4)),
                   ((u(5) << 24) | (u(6) << 16) | (u(7) << 8) | u(8)) & 0x7fffffffU, bytes.substr(pos + 9, length)});
    pos += 9 + length;
  }
  return out;
}

// Decodes the HPACK literals this class writes (and the one indexed field), by RFC 7541.
std::vector<std::pair<std::string, std::string>> Decode(const std::string& block) {
  std::vector<std::pair<std::string, std::string>> fields;
  size_t pos = 0;
  auto integer = [&](int prefix_bits) {
    const uint64_t max = (1u << prefix_bits) - 1;
    uint64_t v = static_cast<unsigned char>(block[pos++]) & max;
    if (v < max) return v;
    for (int shift = 0;; shift += 7) {
      const auto b = static_cast<unsigned char>(block[pos++]);
      v += static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
  };
  auto string = [&] {
    EXPECT_EQ(static_cast<unsigned char>(block[pos]) & 0x80, 0) << "Huffman-coded";
    const uint64_t n = integer(7);
    std::string s = block.substr(pos, n);
    pos += n;
    return s;
  };
  while (pos < block.size()) {
    const auto first = static_cast<unsigned char>(block[pos]);
    if (first == 0x88) {
      ++pos;
      fields.emplace_back(":status", "200");
    } else if (first == 0x00) {
      ++pos;
      std::string name = string();
      fields.emplace_back(name, string());
    } else {
      EXPECT_EQ(first & 0xf0, 0) << "only literals without indexing are expected";
      EXPECT_EQ(integer(4), 31u);  // content-type
      fields.emplace_back("content-type", string());
    }
  }
  return fields;
}

std::string ClientStart(uint32_t stream, const std::string& body) {
  return std::string(kHttp2ClientPreface) + Header(6, 0x4, 0, 0) + std::string(6, '\1') +  // SETTINGS
         Header(4, 0x8, 0, 0) + std::string(4, '\0') +                                     // WINDOW_UPDATE
         Header(3, 0x1, 0x4, stream) + "abc" +                                             // HEADERS
         Header(static_cast<uint32_t>(body.size()), 0x0, 0x1, stream) + body;              // DATA
}

TEST(Http2Refusal, EndsEveryCallWithFailedPreconditionAndTheMessage) {
  const std::string message = "127.0.0.1:7160 is a plexus peer: use 100% a server's address " + std::string(150, 'x');
  Http2Refusal r(message);
  const std::vector<H2Frame> frames = Frames(r.Feed(ClientStart(1, "request body")));
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[0].type, 0x4);  // the server preface first
  EXPECT_EQ(frames[0].flags, 0);
  EXPECT_EQ(frames[1].type, 0x4);  // the client's SETTINGS acknowledged
  EXPECT_EQ(frames[1].flags, 0x1);
  EXPECT_EQ(frames[2].type, 0x1);
  EXPECT_EQ(frames[2].flags, 0x5);  // END_STREAM | END_HEADERS: trailers only
  EXPECT_EQ(frames[2].stream, 1u);
  const auto fields = Decode(frames[2].payload);
  ASSERT_EQ(fields.size(), 4u);
  EXPECT_EQ(fields[0], (std::pair<std::string, std::string>{":status", "200"}));
  EXPECT_EQ(fields[1], (std::pair<std::string, std::string>{"content-type", "application/grpc"}));
  EXPECT_EQ(fields[2], (std::pair<std::string, std::string>{"grpc-status", "9"}));
  std::string expected = message;
  expected.replace(expected.find('%'), 1, "%25");
  EXPECT_EQ(fields[3], (std::pair<std::string, std::string>{"grpc-message", expected}));
  EXPECT_EQ(r.answered(), 1u);
  // A second call on the same connection is answered too; bodies never are.
  const auto more = Frames(r.Feed(Header(3, 0x1, 0x4, 3) + "abc" + Header(2, 0x0, 0x1, 3) + "zz"));
  ASSERT_EQ(more.size(), 1u);
  EXPECT_EQ(more[0].stream, 3u);
  EXPECT_FALSE(r.failed());
}

TEST(Http2Refusal, AnswersTheSameWhateverHowTheBytesAreSplit) {
  const std::string client = ClientStart(1, std::string(40000, 'b'));
  Http2Refusal whole("m");
  const std::string expected = whole.Feed(client);
  Http2Refusal bytewise("m");
  std::string got;
  for (char c : client) got += bytewise.Feed(std::string(1, c));
  EXPECT_EQ(got, expected);
  EXPECT_EQ(bytewise.answered(), 1u);
}

TEST(Http2Refusal, SaysNothingToWhatIsNotHttp2) {
  Http2Refusal r("m");
  EXPECT_EQ(r.Feed("PRI * HTTP/1.1\r\n\r\n"), "");
  EXPECT_TRUE(r.failed());
  EXPECT_EQ(r.Feed(ClientStart(1, "")), "");
}

}  // namespace
}  // namespace plexus::gossip
