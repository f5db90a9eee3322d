// libFuzzer target: the peer link's frame decoder and model reassembly (gossip/node/frame.h),
// which read bytes any host can send to a `plexus peer`. The first byte picks how the input is
// cut into reads; every chunk frame goes to a model stream (safetensors, decoded as it arrives)
// announced at 256 bytes. Any input gives frames within the limit or an error; none crashes,
// reads out of bounds or allocates beyond the limits.
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string_view>
#include <vector>

#include "core/model_state.h"
#include "gossip/node/frame.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  constexpr uint32_t kMaxPayload = 256;
  const size_t step = 1 + data[0] % 31;
  const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  plexus::gossip::FrameReader reader(kMaxPayload);
  std::vector<plexus::gossip::Frame> frames;
  auto model = plexus::gossip::ModelAssembler::Begin(256, plexus::Sha256Hex(std::string(256, 'm')), 1024);
  if (!model.ok()) std::abort();
  for (size_t i = 0; i < bytes.size(); i += step) {
    frames.clear();
    const plexus::Status s = reader.Append(bytes.substr(i, step), &frames);
    for (const plexus::gossip::Frame& f : frames) {
      if (f.payload.size() > kMaxPayload) std::abort();
      if (f.type == plexus::gossip::FrameType::kChunk && model->Add(f.index, f.payload).ok() && model->complete()) {
        (void)std::move(*model).Finish();
        return 0;
      }
    }
    if (reader.buffered() > kMaxPayload + plexus::gossip::kFrameHeaderBytes) std::abort();
    if (!s.ok()) return 0;
  }
  return 0;
}
