// libFuzzer target: the server's reader of upload chunks straight from gRPC's buffers
// (server/rpc/update_chunk_wire.h). The first byte sets the size of the pieces the rest is cut
// into; the answer must not depend on the cut (the same chunk or the same refusal as for one piece).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/cut_message.h"
#include "server/rpc/update_chunk_wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const plexus::fuzz::CutMessage m = plexus::fuzz::Cut(data, size);
  const auto cut = plexus::ParseUpdateChunk(m.pieces);
  const auto whole = plexus::ParseUpdateChunk(std::span<const std::string_view>(&m.whole, 1));
  if (cut.ok() != whole.ok()) std::abort();
  if (!cut.ok()) {
    if (cut.status().message() != whole.status().message()) std::abort();
    return 0;
  }
  const std::string joined = plexus::fuzz::Joined(cut->data);
  if (!plexus::fuzz::AllInside(cut->data, m.whole) || joined.size() != cut->data_bytes ||
      cut->has_header != whole->has_header || cut->header != whole->header ||
      joined != plexus::fuzz::Joined(whole->data)) {
    std::abort();
  }
  return 0;
}
