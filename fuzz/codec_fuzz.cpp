// libFuzzer target: the compressed-update decoders (compression/codec.h), which read bytes a
// client sends. The first byte picks the codec, the rest is the payload, decoded against a fixed
// two-tensor layout. Any input gives an error or a delta of that layout with finite values;
// none crashes or reads out of bounds.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "compression/codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const char* const kSpecs[] = {"f32",      "fp16",         "bf16", "int8:chunk=8", "topk:ratio=0.1",
                                       "terngrad", "qsgd:levels=4"};
  static const plexus::ModelState layout = *plexus::ModelState::Create({{"a", {3, 5}}, {"b", {7}}});
  if (size == 0) return 0;
  auto codec = *plexus::MakeCodec(kSpecs[data[0] % 7]);
  const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  plexus::Result<plexus::ModelState> out = codec->Decode(bytes, layout);
  if (out.ok() && (!out->CheckSameLayout(layout).ok() || !out->CheckFinite().ok())) std::abort();
  return 0;
}
