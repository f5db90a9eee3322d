#include "server/rpc/update_chunk_wire.h"

#include <cstdint>
#include <string>

#include "proto/wire_reader.h"

namespace plexus {
namespace {

constexpr uint32_t kHeaderField = 1;  // UpdateChunk.header
constexpr uint32_t kDataField = 2;    // UpdateChunk.data

Status Malformed(const std::string& what) { return InvalidArgumentError("malformed upload chunk: " + what); }

}  // namespace

Result<UpdateChunkView> ParseUpdateChunk(std::span<const std::string_view> pieces) {
  UpdateChunkView view;
  WireReader in(pieces);
  int parts = 0;
  while (!in.AtEnd()) {
    uint64_t tag = 0;
    if (!in.ReadVarint(&tag)) return Malformed("truncated field tag");
    const uint64_t field = tag >> 3;
    const auto wire_type = static_cast<uint32_t>(tag & 7);
    if (field == 0 || field > (uint64_t{1} << 29) - 1) return Malformed("field number " + std::to_string(field));
    switch (wire_type) {
      case kWireVarint:
        if (!in.SkipValue(wire_type)) return Malformed("truncated varint of field " + std::to_string(field));
        break;
      case kWireFixed64:
      case kWireFixed32:
        if (!in.SkipValue(wire_type)) return Malformed("truncated fixed-size field " + std::to_string(field));
        break;
      case kWireLengthDelimited: {
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
