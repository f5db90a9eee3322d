// libFuzzer target: the safetensors decoder, the format of every model and update that crosses
// the network (UploadUpdate decodes each update with it) or the disk. Whatever the bytes, decoding
// returns an error or a model; a decoded model encodes and decodes back to itself.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  plexus::Result<plexus::ModelState> model = plexus::DecodeSafetensors(bytes);
  if (!model.ok()) return 0;
  (void)model->CheckFinite();
  (void)model->ContentSha256();
  plexus::Result<plexus::ModelState> again = plexus::DecodeSafetensors(plexus::EncodeSafetensors(*model));
  // NaN payloads compare unequal to themselves: compare the bytes instead.
  if (!again.ok() || again->ContentSha256() != model->ContentSha256()) std::abort();
  return 0;
}
