#include "server/rpc/update_chunk_wire.h"

#include <algorithm>
#include <cstdint>

namespace plexus {
namespace {

constexpr uint32_t kHeaderField = 1;  // UpdateChunk.header
constexpr uint32_t kDataField = 2;    // UpdateChunk.data

// A read position over the pieces.
class Cursor {
 public:
  explicit Cursor(std::span<const std::string_view> pieces) : pieces_(pieces) { SkipEmpty(); }

  bool AtEnd() const { return piece_ == pieces_.size(); }

  bool ReadVarint(uint64_t* value) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (AtEnd()) return false;
      const auto byte = static_cast<uint8_t>(pieces_[piece_][offset_]);
      Advance(1);
      v |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) {
        *value = v;
        return true;
      }
    }
    return false;  // more than ten bytes
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
  size_t piece_ = 0;
  size_t offset_ = 0;
};

Status Malformed(const std::string& what) { return InvalidArgumentError("malformed upload chunk: " + what); }

}  // namespace

Result<UpdateChunkView> ParseUpdateChunk(std::span<const std::string_view> pieces) {
  UpdateChunkView view;
  Cursor in(pieces);
  int parts = 0;
  while (!in.AtEnd()) {
    uint64_t tag = 0;
    if (!in.ReadVarint(&tag)) return Malformed("truncated field tag");
    const uint64_t field = tag >> 3;
    const auto wire_type = static_cast<uint32_t>(tag & 7);
    if (field == 0 || field > (uint64_t{1} << 29) - 1) return Malformed("field number " + std::to_string(field));
    uint64_t ignored = 0;
    switch (wire_type) {
      case 0:  // varint
        if (!in.ReadVarint(&ignored)) return Malformed("truncated varint of field " + std::to_string(field));
        break;
      case 1:  // 64-bit
      case 5:  // 32-bit
        if (!in.Take(wire_type == 1 ? 8 : 4, [](std::string_view) {})) {
          return Malformed("truncated fixed-size field " + std::to_string(field));
        }
        break;
      case 2: {  // length-delimited
        uint64_t length = 0;
        if (!in.ReadVarint(&length)) return Malformed("truncated length of field " + std::to_string(field));
        bool complete = true;
        if (field == kHeaderField || field == kDataField) {
          if (++parts > 1) return Malformed("it carries more than one part (a header and data, or two of either)");
          view.has_header = field == kHeaderField;
          complete = view.has_header ? in.Take(length, [&](std::string_view s) { view.header.append(s); })
                                     : in.Take(length, [&](std::string_view s) {
                                         view.data.push_back(s);
                                         view.data_bytes += s.size();
                                       });
        } else {
          complete = in.Take(length, [](std::string_view) {});
        }
        if (!complete) return Malformed("field " + std::to_string(field) + " is longer than the message");
        break;
      }
      default:
        return Malformed("wire type " + std::to_string(wire_type) + " of field " + std::to_string(field));
    }
    if (wire_type != 2 && (field == kHeaderField || field == kDataField)) {
      return Malformed("field " + std::to_string(field) + " has wire type " + std::to_string(wire_type));
    }
  }
  if (parts == 0) return Malformed("it carries neither a header nor data");
  return view;
}

}  // namespace plexus
