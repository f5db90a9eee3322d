// DownloadSink: where a model download's bytes go, in order, as they arrive. A transport
// (FederationTransport::Download) resumes at received() and hands each further piece to Append
// with the size the stream announces, so an interrupted download continues where it stopped.
// StringDownloadSink keeps the bytes whole (coded downloads, tools, tests);
// ModelDownloadSink decodes a float32 safetensors stream into the model as it arrives, so the
// model's memory is the only copy the client holds (not the encoded stream beside it), and checks
// the whole against the SHA-256 its task names. Thread-compatible.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "core/model_state.h"
#include "core/safetensors.h"
#include "core/status.h"

namespace plexus {

class DownloadSink {
 public:
  virtual ~DownloadSink() = default;
  // Bytes taken so far: where a (resumed) download continues.
  virtual uint64_t received() const = 0;
  // The next `piece` of a stream of `total` bytes. DataLoss when it cannot belong to it (a size
  // other than the one announced before, bytes past it, or bytes that are not the format the sink
  // decodes): the caller then starts over from byte 0.
  virtual Status Append(std::string_view piece, uint64_t total) = 0;
};

// The bytes, whole, in `*bytes` (appended to what it holds: a resumed download).
class StringDownloadSink final : public DownloadSink {
 public:
  explicit StringDownloadSink(std::string* bytes) : bytes_(bytes) {}
  uint64_t received() const override { return bytes_->size(); }
  Status Append(std::string_view piece, uint64_t total) override;
  // The size the stream announced (0 before its first piece).
  uint64_t total() const { return total_; }

 private:
  std::string* bytes_;
  uint64_t total_ = 0;
};

// A float32 model decoded as its bytes arrive.
class ModelDownloadSink final : public DownloadSink {
 public:
  // `on_bytes` (optional) hears of every piece with its offset in the stream (to keep the bytes
  // in a state directory while they arrive).
  using OnBytes = std::function<void(uint64_t offset, std::string_view piece)>;
  explicit ModelDownloadSink(OnBytes on_bytes = {}) : on_bytes_(std::move(on_bytes)) {}
  // Bytes kept from an earlier attempt, given before any Append: decoded with the first piece,
  // once the stream's size is known.
  void Prefill(std::string bytes) { prefix_ = std::move(bytes); }
  uint64_t received() const override { return decoder_ ? decoder_->received() : prefix_.size(); }
  Status Append(std::string_view piece, uint64_t total) override;
  // Forgets every byte: the next download starts at byte 0.
  void Reset();
  // The model once every announced byte came; DataLoss before, or for bytes that are not a
  // model.
  Result<ModelState> Finish() &&;
  // As Finish, checked against what its task names: DataLoss when the bytes are not that model.
  // With `crc32c` (Task::model_crc32c), the model's ContentCrc32c is compared, else its
  // ContentSha256 with `sha256`: the link already vouches for the bytes in transit, so the check
  // is that they are the version named, and the checksum costs a fraction of the hash (which was
  // a sixth of the CPU of a federation of ten clients on one machine).
  Result<ModelState> Finish(const std::string& sha256, std::optional<uint32_t> crc32c = std::nullopt) &&;

 private:
  OnBytes on_bytes_;
  std::string prefix_;  // kept bytes waiting for the stream's size
  std::optional<SafetensorsStreamDecoder> decoder_;
  uint64_t total_ = 0;
};

}  // namespace plexus
