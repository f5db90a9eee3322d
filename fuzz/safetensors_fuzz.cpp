// libFuzzer target: the safetensors decoders, the format of every model and update that crosses
// the network (UploadUpdate decodes each update as its chunks arrive) or the disk. Whatever the
// bytes, decoding returns an error or a model; a decoded model encodes and decodes back to
// itself; and the stream decoder, fed the same bytes in pieces (their size set by the first
// byte), agrees with the whole decoder, and (asked to, by the first byte's bit 6) takes the
// model's ContentCrc32c as the values land, as a client's download does.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "core/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t piece = 1 + data[0] % 64;
  const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  plexus::Result<plexus::ModelState> model = plexus::DecodeSafetensors(bytes);

  const bool with_crc = (data[0] & 0x40) != 0;
  plexus::SafetensorsStreamDecoder stream(bytes.size(), with_crc);
  bool stream_ok = true;
  for (size_t at = 0; at < bytes.size() && stream_ok; at += piece) {
    stream_ok = stream.Append(bytes.substr(at, std::min(piece, bytes.size() - at))).ok();
  }
  const std::optional<uint32_t> crc32c = stream.ContentCrc32c();
  plexus::Result<plexus::ModelState> streamed =
      stream_ok ? std::move(stream).Finish() : plexus::Result<plexus::ModelState>(plexus::InvalidArgumentError("x"));
  if (streamed.ok() != model.ok()) std::abort();
  if (!model.ok()) return 0;
  // NaN payloads compare unequal to themselves: compare the bytes instead.
  if (streamed->ContentSha256() != model->ContentSha256() || streamed->version() != model->version()) std::abort();
  if (crc32c != (with_crc ? std::optional<uint32_t>(model->ContentCrc32c()) : std::nullopt)) std::abort();
  (void)model->CheckFinite();
  plexus::Result<plexus::ModelState> again = plexus::DecodeSafetensors(plexus::EncodeSafetensors(*model));
  if (!again.ok() || again->ContentSha256() != model->ContentSha256()) std::abort();
  return 0;
}
