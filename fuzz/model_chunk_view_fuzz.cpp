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

#include "proto/model_chunk_view.h"

namespace {

std::string Joined(const plexus::ModelChunkView& v) {
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
  plexus::ModelChunkView cut, whole;
  const plexus::Status cut_status = plexus::ParseModelChunk(pieces, &cut);
  const plexus::Status whole_status = plexus::ParseModelChunk(std::span<const std::string_view>(&message, 1), &whole);
  if (cut_status.ok() != whole_status.ok()) std::abort();
  if (!cut_status.ok()) {
    if (cut_status.message() != whole_status.message()) std::abort();
    return 0;
  }
  size_t bytes = 0;
  for (std::string_view p : cut.data) {
    if (p.data() < message.data() || p.data() + p.size() > message.data() + message.size()) std::abort();
    bytes += p.size();
  }
  if (bytes != cut.data_bytes || cut.version != whole.version || cut.total_bytes != whole.total_bytes ||
      cut.offset != whole.offset || cut.describes_coding != whole.describes_coding || Joined(cut) != Joined(whole)) {
    std::abort();
  }
  return 0;
}
