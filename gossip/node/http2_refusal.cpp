#include "gossip/node/http2_refusal.h"

#include <algorithm>

namespace plexus::gossip {
namespace {

constexpr size_t kFrameHeader = 9;
constexpr uint8_t kHeaders = 0x1, kSettings = 0x4;
constexpr uint8_t kFlagAck = 0x1, kFlagEndStream = 0x1, kFlagEndHeaders = 0x4;

std::string FrameHeader(uint32_t length, uint8_t type, uint8_t flags, uint32_t stream) {
  std::string h(kFrameHeader, '\0');
  h[0] = static_cast<char>((length >> 16) & 0xff);
  h[1] = static_cast<char>((length >> 8) & 0xff);
  h[2] = static_cast<char>(length & 0xff);
  h[3] = static_cast<char>(type);
  h[4] = static_cast<char>(flags);
  for (int i = 0; i < 4; ++i) h[5 + i] = static_cast<char>((stream >> (24 - 8 * i)) & 0xff);
  return h;
}

// An HPACK integer (RFC 7541 §5.1) with an `prefix_bits` prefix whose high bits are `first`.
void PutInteger(std::string* out, uint8_t first, int prefix_bits, uint64_t v) {
  const uint64_t max = (1u << prefix_bits) - 1;
  if (v < max) {
    out->push_back(static_cast<char>(first | v));
    return;
  }
  out->push_back(static_cast<char>(first | max));
  for (v -= max; v >= 128; v /= 128) out->push_back(static_cast<char>(0x80 | (v % 128)));
  out->push_back(static_cast<char>(v));
}

void PutString(std::string* out, std::string_view s) {
  PutInteger(out, 0x00, 7, s.size());  // H = 0: no Huffman coding
  out->append(s);
}

// A literal header field without indexing, with a new name (RFC 7541 §6.2.2).
void PutLiteral(std::string* out, std::string_view name, std::string_view value) {
  out->push_back(0x00);
  PutString(out, name);
  PutString(out, value);
}

// grpc-message is percent-encoded: bytes outside printable ASCII, and '%' itself.
std::string PercentEncode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c <= 0x7e && c != '%') {
      out.push_back(static_cast<char>(c));
    } else {
      out += {'%', kHex[c >> 4], kHex[c & 0xf]};
    }
  }
  return out;
}

}  // namespace

std::string Http2Refusal::Answer(uint32_t stream) const {
  std::string block;
  block.push_back(static_cast<char>(0x88));  // :status 200, static table entry 8
  PutInteger(&block, 0x00, 4, 31);           // content-type (static entry 31), literal value
  PutString(&block, "application/grpc");
  PutLiteral(&block, "grpc-status", "9");  // FAILED_PRECONDITION: final, not retried
  PutLiteral(&block, "grpc-message", PercentEncode(message_));
  return FrameHeader(static_cast<uint32_t>(block.size()), kHeaders, kFlagEndStream | kFlagEndHeaders, stream) + block;
}

std::string Http2Refusal::Feed(std::string_view bytes) {
  std::string out;
  if (failed_) return out;
  size_t pos = 0;
  if (!preface_done_) {
    const size_t take = std::min(kHttp2ClientPreface.size() - header_.size(), bytes.size());
    header_.append(bytes.substr(0, take));
    pos = take;
    if (kHttp2ClientPreface.substr(0, header_.size()) != header_) {
      failed_ = true;
      return out;
    }
    if (header_.size() < kHttp2ClientPreface.size()) return out;
    header_.clear();
    preface_done_ = true;
  }
  if (!settings_sent_) {
    out += FrameHeader(0, kSettings, 0, 0);  // the server preface: default settings
    settings_sent_ = true;
  }
  while (pos < bytes.size()) {
    if (skip_ > 0) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(skip_, bytes.size() - pos));
      skip_ -= n;
      pos += n;
      continue;
    }
    const size_t take = std::min(kFrameHeader - header_.size(), bytes.size() - pos);
    header_.append(bytes.substr(pos, take));
    pos += take;
    if (header_.size() < kFrameHeader) break;
    const auto u = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(header_[i])); };
    const uint32_t length = (u(0) << 16) | (u(1) << 8) | u(2);
    const uint8_t type = static_cast<uint8_t>(u(3)), flags = static_cast<uint8_t>(u(4));
    const uint32_t stream = ((u(5) << 24) | (u(6) << 16) | (u(7) << 8) | u(8)) & 0x7fffffffU;
    header_.clear();
    skip_ = length;
    if (type == kSettings && (flags & kFlagAck) == 0) out += FrameHeader(0, kSettings, kFlagAck, 0);
    if (type == kHeaders && stream != 0 && answered_.insert(stream).second) out += Answer(stream);
  }
  return out;
}

}  // namespace plexus::gossip
