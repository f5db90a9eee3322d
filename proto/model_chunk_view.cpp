#include "proto/model_chunk_view.h"

#include <string>

#include "proto/wire_reader.h"

namespace plexus {
namespace {

// ModelChunk's field numbers (federation.proto).
constexpr uint64_t kVersionField = 1;
constexpr uint64_t kTotalBytesField = 2;
constexpr uint64_t kOffsetField = 3;
constexpr uint64_t kDataField = 4;
constexpr uint64_t kFirstCodingField = 5;  // codec, base_sha256, model_sha256, layout: 5 to 8
constexpr uint64_t kLastCodingField = 8;

Status Malformed(const std::string& what) { return DataLossError("download: a model chunk with " + what); }

}  // namespace

Status ParseModelChunk(std::span<const std::string_view> pieces, ModelChunkView* view) {
  *view = ModelChunkView{};
  WireReader in(pieces);
  while (!in.AtEnd()) {
    uint64_t tag = 0;
    if (!in.ReadVarint(&tag)) return Malformed("a truncated field tag");
    const uint64_t field = tag >> 3;
    const auto wire_type = static_cast<uint32_t>(tag & 7);
    if (field == 0 || field > (uint64_t{1} << 29) - 1) return Malformed("field number " + std::to_string(field));
    const bool number = field == kVersionField || field == kTotalBytesField || field == kOffsetField;
    if ((number && wire_type != kWireVarint) || (field == kDataField && wire_type != kWireLengthDelimited)) {
      return Malformed("wire type " + std::to_string(wire_type) + " in field " + std::to_string(field));
    }
    if (number) {
      uint64_t value = 0;
      if (!in.ReadVarint(&value)) return Malformed("a truncated varint in field " + std::to_string(field));
      (field == kVersionField ? view->version : field == kTotalBytesField ? view->total_bytes : view->offset) = value;
    } else if (field == kDataField) {
      uint64_t length = 0;
      if (!in.ReadVarint(&length)) return Malformed("a truncated length in field 4");
      view->data.clear();  // a later one replaces an earlier one
      view->data_bytes = 0;
      if (!in.Take(length, [view](std::string_view piece) {
            view->data.push_back(piece);
            view->data_bytes += piece.size();
          })) {
        return Malformed("field 4 longer than the message");
      }
    } else if (!in.SkipValue(wire_type)) {
      return Malformed("a truncated or unknown value (wire type " + std::to_string(wire_type) + ") in field " +
                       std::to_string(field));
    }
    if (field >= kFirstCodingField && field <= kLastCodingField) view->describes_coding = true;
  }
  return Status::Ok();
}

}  // namespace plexus
