// ParseUpdateChunk: reads one plexus.v1.UpdateChunk message (proto/plexus/v1/federation.proto)
// straight from the pieces gRPC received it in, so that an upload's data goes from gRPC's buffers
// into the decoder without protobuf first copying it into a string. The data comes back as views
// into the pieces (valid while they are); the header, small, as its serialized bytes for protobuf
// to parse. Follows protobuf's wire format: unknown fields are skipped; a chunk with no part or
// with more than one is refused (protobuf clients never send one). No protobuf dependency, so
// the parser is fuzzed on its own. Thread-compatible (a free function over its inputs).
#pragma once
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace plexus {

struct UpdateChunkView {
  bool has_header = false;
  std::string header;                  // the serialized UpdateHeader, when has_header
  std::vector<std::string_view> data;  // otherwise the data field's bytes, in order, over the pieces
  size_t data_bytes = 0;
};

// InvalidArgument naming the fault for a malformed message (a truncated field or varint, a
// group or unknown wire type, a length past the end, no part or two parts).
Result<UpdateChunkView> ParseUpdateChunk(std::span<const std::string_view> pieces);

}  // namespace plexus
