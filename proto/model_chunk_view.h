// ModelChunkView: a plexus.v1.ModelChunk read from the pieces of memory gRPC received it in,
// its `data` left there (as pieces, in order) instead of copied into a string as the generated
// parser does. A client's float32 download hands those pieces straight to its decoder, so each
// downloaded byte is copied once in user space (into the model) rather than twice. The fields
// of a coded download's description (codec, base_sha256, model_sha256, layout) are noted as
// present, not read: such downloads go through the generated parser. Plain functions; the view
// points into the caller's buffers and lives no longer than they do.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace plexus {

struct ModelChunkView {
  uint64_t version = 0;      // ModelChunk.version
  uint64_t total_bytes = 0;  // ModelChunk.total_bytes
  uint64_t offset = 0;       // ModelChunk.offset
  // ModelChunk.data, in the order of its bytes; empty when the message has none.
  std::vector<std::string_view> data;
  size_t data_bytes = 0;          // the pieces' total length
  bool describes_coding = false;  // one of fields 5 to 8 (a coded download) is present
};

// Reads the message whose bytes are `pieces` in order (any split, down to single bytes) into
// `*view`. Fields it does not know are skipped, as protobuf skips them; a later `data` replaces
// an earlier one, as protobuf's parser does for a bytes field. DataLoss when the bytes are not
// a well-formed message (a truncated varint or field, a length past the end, a group, a varint
// over ten bytes, a known field in another wire type).
Status ParseModelChunk(std::span<const std::string_view> pieces, ModelChunkView* view);

}  // namespace plexus
