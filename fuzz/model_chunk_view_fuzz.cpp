// libFuzzer target: the client's reader of model chunks straight from gRPC's buffers
// (proto/model_chunk_view.h). The first byte sets the size of the pieces the rest is cut into;
// the answer must not depend on the cut (the same fields and data, or the same refusal, as for
// one piece), and the data must lie inside the message.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/cut_message.h"
#include "proto/model_chunk_view.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const plexus::fuzz::CutMessage m = plexus::fuzz::Cut(data, size);
  plexus::ModelChunkView cut, whole;
  const plexus::Status cut_status = plexus::ParseModelChunk(m.pieces, &cut);
  const plexus::Status whole_status = plexus::ParseModelChunk(std::span<const std::string_view>(&m.whole, 1), &whole);
  if (cut_status.ok() != whole_status.ok()) std::abort();
  if (!cut_status.ok()) {
    if (cut_status.message() != whole_status.message()) std::abort();
    return 0;
  }
  const std::string joined = plexus::fuzz::Joined(cut.data);
  if (!plexus::fuzz::AllInside(cut.data, m.whole) || joined.size() != cut.data_bytes || cut.version != whole.version ||
      cut.total_bytes != whole.total_bytes || cut.offset != whole.offset ||
      cut.describes_coding != whole.describes_coding || joined != plexus::fuzz::Joined(whole.data)) {
    std::abort();
  }
  return 0;
}
