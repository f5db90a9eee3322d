// ClientStateDir: what a client keeps on disk (`plexus client --state-dir DIR`) so that a client
// killed and started again continues instead of starting over: its identity, the newest model it
// downloaded (or the bytes it had of one it was downloading), and a trained update it had not
// finished uploading. Files are replaced atomically (core/atomic_file.h) or appended to and
// checked by SHA-256 when read back, so a torn file is noticed and dropped, never used.
// Owns nothing but the directory's files; one client per directory. Thread-compatible.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "client/federation_transport.h"
#include "compute/trainer.h"
#include "core/model_state.h"
#include "core/payload.h"
#include "core/status.h"

namespace plexus {

// A trained update the server has not acknowledged yet.
struct PendingUpload {
  UploadHeader header;  // resume and want_next_task are not kept
  std::string payload;  // the update's safetensors bytes
};

class ClientStateDir {
 public:
  // The directory's files are untrusted input: a file is read only when it is a regular file
  // (symbolic links are never followed, for reading or writing), owned by this process's user,
  // and no larger than what it can hold (`max_model_bytes` for models and updates, a few KB for
  // the rest). A file that fails is dropped with a warning and the client goes on without it:
  // a 10 GiB model file once made a device read it whole and die of memory at every start.
  static constexpr uint64_t kDefaultMaxModelBytes = (1ull << 30) + (1 << 20);
  // Larger than this, or not finite, a kept top-k residual is dropped (it is added to every
  // update: one NaN in it had every upload of the client refused forever).
  static constexpr double kMaxResidualValue = 1e9;

  // Creates `dir` if needed. InvalidArgument when it cannot be created or written.
  static Result<std::unique_ptr<ClientStateDir>> Open(const std::string& dir,
                                                      uint64_t max_model_bytes = kDefaultMaxModelBytes);

  const std::string& path() const { return dir_; }

  // The id the server knew this client by (empty: none kept).
  std::string ClientId() const;
  Status SaveClientId(const std::string& id);

  // The bytes kept of model `version`: the whole encoded model when `*complete`, else the first
  // part of an interrupted download (possibly none). Another version's files are not returned.
  std::string ModelBytes(uint64_t version, bool* complete) const;
  // Appends downloaded bytes of `version` to its partial file (starting one, and dropping
  // every other version's files, when `at_offset` is 0). FailedPrecondition when the partial
  // file does not hold exactly `at_offset` bytes.
  Status AppendModelBytes(uint64_t version, uint64_t at_offset, std::string_view bytes);
  // Marks the partial file of `version` complete (after its SHA-256 was checked).
  Status CompleteModel(uint64_t version);
  // Forgets what is kept of `version` (it did not verify).
  void DropModel(uint64_t version);

  // Keeps an update (its header and payload) until DropPendingUpload, replacing an earlier one.
  Status SavePendingUpload(const UploadHeader& header, const Payload& payload);
  // The kept upload; nullopt when there is none or its files are torn or do not match (those
  // are removed).
  std::optional<PendingUpload> LoadPendingUpload();
  void DropPendingUpload();

  // The error feedback of a codec that keeps one (top-k), across tasks and restarts.
  Status SaveResidual(const ModelState& residual);
  std::optional<ModelState> LoadResidual() const;  // nullopt: none kept, or unreadable

  // The inner optimizer's moments (AdamW's), across tasks and restarts. nullopt: none kept, or
  // unreadable, or not a state (two moments of one size, finite, the second not negative): such a
  // file is dropped with a warning and the client's moments start afresh.
  Status SaveOptimizerState(const OptimizerState& state);
  std::optional<OptimizerState> LoadOptimizerState() const;

 private:
  ClientStateDir(std::string dir, uint64_t max_model_bytes) : dir_(std::move(dir)), max_model_bytes_(max_model_bytes) {}
  // The file's bytes when it passes the checks above with at most `max_bytes`; nullopt when it
  // is missing, or fails them (then it is removed, with a warning).
  std::optional<std::string> ReadKept(const std::string& path, uint64_t max_bytes) const;
  std::string File(std::string_view name) const { return dir_ + "/" + std::string(name); }
  std::string ModelFile(uint64_t version, bool complete) const;
  void DropModelsExcept(uint64_t version);

  const std::string dir_;
  const uint64_t max_model_bytes_;
};

}  // namespace plexus
