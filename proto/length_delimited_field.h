// LengthDelimitedFieldHeader: the bytes protobuf writes before a length-delimited field (a bytes,
// string or message field): its tag, then the length as a varint. The raw transfers (client
// uploads, server downloads) send a chunk's data behind this header instead of building a
// protobuf message around it, so the bytes on the wire are still those of the message.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace plexus {

inline std::string LengthDelimitedFieldHeader(uint32_t field, size_t length) {
  std::string out;
  for (uint64_t v = (uint64_t{field} << 3) | 2;; v >>= 7) {  // the tag, then the length
    out.push_back(static_cast<char>((v & 0x7f) | (v > 0x7f ? 0x80 : 0)));
    if (v <= 0x7f) break;
  }
  for (uint64_t v = length;; v >>= 7) {
    out.push_back(static_cast<char>((v & 0x7f) | (v > 0x7f ? 0x80 : 0)));
    if (v <= 0x7f) break;
  }
  return out;
}

}  // namespace plexus
