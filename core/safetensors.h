// Reading and writing models in the safetensors format (F32 tensors only), so models move to and
// from PyTorch (`safetensors.torch.load_file`). The byte layout: an 8-byte little-endian header
// length, a JSON header naming each tensor's dtype, shape and data offsets, then the raw data.
// Plexus keeps its own tensor order in the data section and stores the model version in
// `__metadata__["plexus.version"]`. Decoding validates every size before touching memory.
// Stateless functions; thread-safe.
#pragma once

#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/model_state.h"
#include "core/status.h"

namespace plexus {

// Largest header accepted when decoding; larger headers are refused as malformed.
inline constexpr size_t kMaxSafetensorsHeaderBytes = 16 << 20;

std::string EncodeSafetensors(const ModelState& model);
// What EncodeSafetensors puts before the values: the 8-byte header length and the JSON header
// (padded so that the values start 8-byte aligned). The values follow as model.data()'s bytes.
std::string SafetensorsPrefix(const ModelState& model);
// The same with more `__metadata__` entries (what a reader needs to use the model: its input
// preprocessing, input shape, classes). Decoding ignores entries it does not know.
std::string SafetensorsPrefix(const ModelState& model, const std::map<std::string, std::string>& metadata);
// SafetensorsPrefix with the header padded so that the values start at a multiple of `alignment`
// (a power of two; 8 at least) from the file's start: with kDirectWriteAlignment, a file writer
// sends the values to the disk from the model's own memory (core/atomic_file.h).
std::string SafetensorsPrefixAlignedTo(const ModelState& model, size_t alignment);

// InvalidArgument on malformed bytes, unsupported dtypes or inconsistent offsets.
Result<ModelState> DecodeSafetensors(std::string_view bytes);

// The model a header (the JSON after the 8-byte length) describes for a data section of
// `data_bytes`, values unspecified; the same checks as DecodeSafetensors.
Result<ModelState> SafetensorsLayout(std::string_view header_json, uint64_t data_bytes);

// Decodes a safetensors stream of a known length as it arrives, piece by piece: once the header
// is in, the model is laid out and the data bytes go straight into its values, so a received
// model is held once (not as bytes and then as a model). Keeps what came, so an interrupted
// stream can resume. Thread-compatible.
class SafetensorsStreamDecoder {
 public:
  // With `content_crc32c`, the values' CRC-32C is taken piece by piece as they land (while in
  // cache, as the finiteness check): ContentCrc32c() then gives the model's, with no other pass.
  explicit SafetensorsStreamDecoder(uint64_t total_bytes, bool content_crc32c = false)
      : total_bytes_(total_bytes), crc_wanted_(content_crc32c) {}
  // InvalidArgument for a malformed header or more bytes than announced; the decoder is then
  // of no further use.
  Status Append(std::string_view bytes);
  // Where the next `bytes` bytes of the stream go in the model when they are all values (the
  // header is in) and within the announced size; empty otherwise. Bytes written there are then
  // given to Append as that very span, which checks and counts them without copying.
  std::span<char> Destination(size_t bytes);
  uint64_t received() const { return received_; }
  // The model's ContentCrc32c once every announced byte came, for a decoder made with
  // `content_crc32c` (ask before Finish); nullopt otherwise.
  std::optional<uint32_t> ContentCrc32c() const;
  // The model, once every announced byte came. InvalidArgument before.
  Result<ModelState> Finish() &&;
  // SHA-256 (lower-case hex) of the bytes received so far, rebuilt from the header and the
  // model's values (for checking a resumed stream against the sender's hash).
  std::string ReceivedSha256() const;

 private:
  uint64_t total_bytes_;
  uint64_t received_ = 0;
  uint64_t header_len_ = 0;
  uint64_t data_received_ = 0;
  std::string header_;       // the 8-byte length and the JSON, as received
  bool non_finite_ = false;  // a NaN or infinity among the values so far
  bool crc_wanted_ = false;
  uint32_t crc_ = 0;  // with crc_wanted_: the content encoding's CRC-32C up to the values so far
  std::optional<ModelState> model_;
};

// NotFound when the file is missing; InvalidArgument when it is malformed; Unavailable when it
// cannot be read.
Result<ModelState> ReadSafetensorsFile(const std::string& path);
// Atomic and durable: writes `path`.tmp, syncs it, renames it over `path` and syncs the directory,
// so that after a crash `path` holds the old file or the whole new one. InvalidArgument when the
// file cannot be created, Unavailable on a failed write or sync.
Status WriteSafetensorsFile(const std::string& path, const ModelState& model,
                            const std::map<std::string, std::string>& metadata = {});

}  // namespace plexus
