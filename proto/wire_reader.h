// WireReader: a read position in a protobuf message whose bytes are split over pieces (the
// slices gRPC received it in), for the raw transfers that read a chunk's few small fields and
// leave its data where it is instead of letting the generated parser copy it into a string
// (server/rpc/update_chunk_wire.h for uploads, proto/model_chunk_view.h for downloads). Reads
// protobuf's wire format: varints, fixed-size values and length-delimited bytes, across piece
// boundaries anywhere. Does not own the pieces. Thread-compatible.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace plexus {

// Protobuf's wire types this reader knows (groups, 3 and 4, are refused by the parsers).
inline constexpr uint32_t kWireVarint = 0;
inline constexpr uint32_t kWireFixed64 = 1;
inline constexpr uint32_t kWireLengthDelimited = 2;
inline constexpr uint32_t kWireFixed32 = 5;

class WireReader {
 public:
  explicit WireReader(std::span<const std::string_view> pieces) : pieces_(pieces) { SkipEmpty(); }

  bool AtEnd() const { return piece_ == pieces_.size(); }

  // False when the bytes end inside the varint or it runs over ten bytes.
  bool ReadVarint(uint64_t* value) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (AtEnd()) return false;
      const auto byte = static_cast<uint8_t>(pieces_[piece_][offset_]);
      Advance(1);
      v |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) {
        *value = v;
        return true;
      }
    }
    return false;
  }

  // Calls f(view) for the next n bytes, piece by piece; false when fewer than n remain.
  template <typename F>
  bool Take(uint64_t n, F&& f) {
    while (n > 0) {
      if (AtEnd()) return false;
      const std::string_view rest = pieces_[piece_].substr(offset_);
      const size_t take = static_cast<size_t>(std::min<uint64_t>(n, rest.size()));
      f(rest.substr(0, take));
      Advance(take);
      n -= take;
    }
    return true;
  }

  // Moves past a value of `wire_type` (a field the caller does not read); false when the bytes
  // end inside it or the type is none of the four above.
  bool SkipValue(uint32_t wire_type) {
    uint64_t n = 0;
    switch (wire_type) {
      case kWireVarint:
        return ReadVarint(&n);
      case kWireFixed64:
        return Take(8, [](std::string_view) {});
      case kWireFixed32:
        return Take(4, [](std::string_view) {});
      case kWireLengthDelimited:
        return ReadVarint(&n) && Take(n, [](std::string_view) {});
      default:
        return false;
    }
  }

 private:
  void Advance(size_t n) {
    offset_ += n;
    if (offset_ == pieces_[piece_].size()) {
      ++piece_;
      offset_ = 0;
      SkipEmpty();
    }
  }
  void SkipEmpty() {
    while (piece_ < pieces_.size() && pieces_[piece_].empty()) ++piece_;
  }

  std::span<const std::string_view> pieces_;
  size_t piece_ = 0;   // the piece being read
  size_t offset_ = 0;  // the next byte's place in it
};

}  // namespace plexus
