// libFuzzer target: the peer link's frame decoder and model reassembly (gossip/node/frame.h),
// which read bytes any host can send to a `plexus peer`. The first byte picks how the input is
// cut into reads and whether they are read as a plaintext link reads them (chunk bodies straight
// into the model: FrameReader's placer, PlacedTarget and ReadLimit, as peer_links.cpp does);
// every chunk frame goes to one model stream (safetensors, decoded as it arrives): the encoding
// of a model of 48 values, announced with its size and SHA-256 (the seed `placed_chunks` sends
// it in checked chunks). Any input gives frames within the limit or an error; none crashes, reads or writes out
// of bounds or allocates beyond the limits.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "core/model_state.h"
#include "core/safetensors.h"
#include "gossip/node/frame.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  constexpr uint32_t kMaxPayload = 256;
  const bool in_place = (data[0] & 0x80) != 0;
  const size_t step = 1 + (data[0] & 0x7f) % 31;
  const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  plexus::gossip::FrameReader reader(kMaxPayload);
  static const std::string kStream = [] {
    plexus::ModelState m = *plexus::ModelState::Create({{"w", {48}}});
    for (float& x : m.data()) x = 0.5f;
    return plexus::EncodeSafetensors(m);
  }();
  auto model = plexus::gossip::ModelAssembler::Begin(kStream.size(), plexus::Sha256Hex(kStream), 1024);
  if (!model.ok()) std::abort();
  bool finished = false;
  if (in_place) {
    reader.set_placer([&](uint32_t, uint32_t index, size_t body) {
      if (finished) return std::span<char>();
      const std::span<char> place = model->Destination(index, body);
      if (!place.empty() && place.size() != body) std::abort();
      return place;
    });
  }
  auto on_frame = [&](const plexus::gossip::FrameView& f) {
    if (f.payload.size() > kMaxPayload) std::abort();
    if (f.placed && !in_place) std::abort();
    if (f.type == plexus::gossip::FrameType::kChunk && model->Add(f.index, f.payload).ok() && model->complete()) {
      (void)std::move(*model).Finish();
      finished = true;
      return false;
    }
    return true;
  };
  for (size_t i = 0; i < bytes.size() && !finished;) {
    const std::span<char> place = reader.PlacedTarget();
    if (in_place && !place.empty()) {
      const size_t n = std::min({place.size(), step, bytes.size() - i});
      std::memcpy(place.data(), bytes.data() + i, n);
      reader.Placed(n);
      i += n;
      continue;
    }
    const size_t n = std::min({reader.ReadLimit(), step, bytes.size() - i});
    if (n == 0) std::abort();  // a reader that asks for nothing would stall its link
    const plexus::Status s = reader.Read(bytes.substr(i, n), on_frame);
    i += n;
    if (reader.buffered() > kMaxPayload + plexus::gossip::kFrameHeaderBytes) std::abort();
    if (!s.ok()) return 0;
  }
  return 0;
}
