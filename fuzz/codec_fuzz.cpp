// libFuzzer target: the compressed-update decoders (compression/codec.h), which read bytes a
// client sends. The first byte picks the codec, the rest is the payload, decoded against a fixed
// two-tensor layout. Any input gives an error or a delta of that layout with finite values;
// none crashes or reads out of bounds. Codecs with a coded form (int8, top-k) also Read the
// bytes: accepted exactly when Decode accepts them, and then their codes sum and materialize to
// the decoded values.
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

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
  if (!codec->has_coded_form()) return 0;
  auto coded = codec->Read(std::string(bytes), layout);
  if (coded.ok() != out.ok()) std::abort();
  if (!coded.ok()) return 0;
  const plexus::CodedDelta& c = **coded;
  if (c.num_values() != layout.num_params()) std::abort();
  if (c.Materialize(layout).ContentSha256() != out->ContentSha256()) std::abort();
  std::vector<double> sum(c.num_values());
  c.AddScaledTo(sum.data(), 0, 9, 1.0, true);  // two ranges that cut int8's chunks of 8
  c.AddScaledTo(sum.data(), 9, c.num_values(), 1.0, true);
  for (size_t i = 0; i < sum.size(); ++i) {
    if (sum[i] != static_cast<double>(out->data()[i])) std::abort();
  }
  return 0;
}
