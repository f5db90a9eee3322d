// libFuzzer target: the server's reader of upload chunks straight from gRPC's buffers
// (server/rpc/update_chunk_wire.h). The first byte sets the size of the pieces the rest is cut
// into; the answer must not depend on the cut (the same chunk or the same refusal as for one piece).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "server/rpc/update_chunk_wire.h"

namespace {

std::string Joined(const plexus::UpdateChunkView& v) {
  std::string out;
  for (std::string_view p : v.data) out.append(p);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = 1 + data[0];
  const std::string_view message(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::vector<std::string_view> pieces;
  for (size_t at = 0; at < message.size(); at += piece) pieces.push_back(message.substr(at, piece));
  const auto cut = plexus::ParseUpdateChunk(pieces);
  const auto whole = plexus::ParseUpdateChunk(std::span<const std::string_view>(&message, 1));
  if (cut.ok() != whole.ok()) std::abort();
  if (!cut.ok()) {
    if (cut.status().message() != whole.status().message()) std::abort();
    return 0;
  }
  size_t bytes = 0;
  for (std::string_view p : cut->data) {
    if (p.data() < message.data() || p.data() + p.size() > message.data() + message.size()) std::abort();
    bytes += p.size();
  }
  if (bytes != cut->data_bytes || cut->has_header != whole->has_header || cut->header != whole->header ||
      Joined(*cut) != Joined(*whole)) {
    std::abort();
  }
  return 0;
}
