// What the fuzz targets of the raw transfers' readers share (update_chunk_wire_fuzz,
// model_chunk_view_fuzz): the input as a message cut into pieces of a size its first byte sets,
// as gRPC's slices may fall, and checks on the data views a reader returns.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace plexus::fuzz {

struct CutMessage {
  std::string_view whole;                // the input after its first byte
  std::vector<std::string_view> pieces;  // the same bytes in pieces of 1 to 256 bytes
};

// REQUIRES: size > 0.
inline CutMessage Cut(const uint8_t* data, size_t size) {
  CutMessage m;
  const size_t piece = 1 + data[0];
  m.whole = std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1);
  for (size_t at = 0; at < m.whole.size(); at += piece) m.pieces.push_back(m.whole.substr(at, piece));
  return m;
}

// The views joined, and whether every one lies inside `message` (a reader's data must point into
// the bytes it was given, never elsewhere).
inline std::string Joined(const std::vector<std::string_view>& views) {
  std::string out;
  for (std::string_view v : views) out.append(v);
  return out;
}
inline bool AllInside(const std::vector<std::string_view>& views, std::string_view message) {
  for (std::string_view v : views) {
    if (v.data() < message.data() || v.data() + v.size() > message.data() + message.size()) return false;
  }
  return true;
}

}  // namespace plexus::fuzz
