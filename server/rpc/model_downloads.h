// ModelDownloads: the bytes clients download for a model version, as float32 safetensors or in
// the server's download codec (CodedDownloads). The current version's float32 bytes are its
// safetensors prefix and the published model's own values (kept with the prefix until the next
// version); older versions are read from the store. Model-sized work runs under this object's own lock, never the
// server's: the caller reads the engine's snapshot (immutable) under its lock and passes it in,
// and concurrent downloads of a new version wait for one encoding instead of each doing it.
// Borrows the store. Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "compression/coded_downloads.h"
#include "core/model_state.h"
#include "core/payload.h"
#include "core/status.h"
#include "server/store/store.h"

namespace plexus {

class ModelDownloads {
 public:
  // `download_codec` empty: float32 downloads only. InvalidArgument for a spec CodedDownloads
  // refuses.
  static Result<std::unique_ptr<ModelDownloads>> Create(Store* store, const std::string& download_codec);

  // Whether coded downloads in `codec` are served.
  bool Serves(const std::string& codec) const { return coded_ != nullptr && codec == codec_; }

  // The float32 safetensors of `version`; `current` is the engine's model now, whose values the
  // bytes are (Payload::SafetensorsOf: not copied); an older version's are its checkpoint's, read.
  Result<std::shared_ptr<const Payload>> Float32(uint64_t version, const std::shared_ptr<const ModelState>& current);

  // The coded download of `version` for a client holding the model whose SHA-256 is
  // `base_sha256` (empty: none). `held_version`: the published version with that hash, if any.
  // REQUIRES: Serves(the codec asked for).
  Result<CodedDownloads::Download> Coded(uint64_t version, const std::string& base_sha256,
                                         const std::shared_ptr<const ModelState>& current,
                                         std::optional<uint64_t> held_version);

 private:
  ModelDownloads(Store* store, std::string codec, std::unique_ptr<CodedDownloads> coded)
      : store_(store), codec_(std::move(codec)), coded_(std::move(coded)) {}

  Store* const store_;
  const std::string codec_;
  std::mutex mu_;
  std::shared_ptr<const Payload> float32_;       // guarded by mu_; of float32_version_
  uint64_t float32_version_ = 0;                 // guarded by mu_
  const std::unique_ptr<CodedDownloads> coded_;  // its state guarded by mu_; null: float32 only
};

}  // namespace plexus
