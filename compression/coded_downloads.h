// CodedDownloads: the model versions a server sends in a download codec (`--download-codec`).
// A client holding a model this object had it rebuild (one of the last `kept_models`), or one the
// caller added as held (AddHeld), gets the change from that model; any other client gets the
// whole model. The sender decodes its own bytes to learn what the client rebuilds, so the next
// change is taken from exactly that model and the codec's error does not pile up from version to
// version. Encodings are kept by (version, the base the client named): in a synchronous round
// every client asks for the same one, which is then encoded once. Used by the gRPC server and by
// the simulator alike.
//
// Thread-compatible: the caller serializes calls. What For returns stays valid (shared).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "compression/codec.h"
#include "core/model_state.h"
#include "core/status.h"

namespace plexus {

class CodedDownloads {
 public:
  struct Download {
    std::shared_ptr<const std::string> bytes;   // the codec's bytes
    std::string base_sha256;                    // the change from this model; empty: the whole model
    std::string model_sha256;                   // ContentSha256 of what the client rebuilds
    std::shared_ptr<const ModelState> rebuilt;  // that model (with the version's number)
  };

  // InvalidArgument for a spec MakeCodec refuses or a codec that does not keep every value
  // (top-k, TernGrad, QSGD: a whole model would arrive with values missing or randomized).
  static Result<std::unique_ptr<CodedDownloads>> Create(std::string_view spec, size_t kept_models = 4,
                                                        size_t kept_encodings = 4);

  // The download of `model` (a version's weights) for a client that holds the model whose
  // ContentSha256 is `base_sha256` (empty: none).
  Result<Download> For(const ModelState& model, const std::string& base_sha256);
  // What For gave for this version and base, when it is still kept (spares the caller reading
  // an older version's weights).
  std::optional<Download> Kept(uint64_t version, const std::string& base_sha256) const;
  // Whether a client holding the model whose hash is `sha256` gets the change from it.
  bool Holds(const std::string& sha256) const;
  // Adds a model a client may hold exactly without this object having sent it (a published
  // version the client downloaded in float32, for an evaluation task or before a restart), with
  // its ContentSha256: the next download to such a client is the change from it. Kept like the
  // models this object had clients rebuild (the last `kept_models` of either).
  void AddHeld(std::shared_ptr<const ModelState> model, const std::string& sha256);

  const std::string& spec() const { return spec_; }

 private:
  CodedDownloads(std::string spec, std::unique_ptr<Codec> codec, size_t kept_models, size_t kept_encodings)
      : spec_(std::move(spec)), codec_(std::move(codec)), kept_models_(kept_models), kept_encodings_(kept_encodings) {}

  const std::string spec_;
  const std::unique_ptr<Codec> codec_;
  const size_t kept_models_;
  const size_t kept_encodings_;
  std::deque<std::shared_ptr<const ModelState>> rebuilt_;  // newest last, with their hashes below
  std::deque<std::string> rebuilt_sha256_;
  std::deque<std::pair<std::pair<uint64_t, std::string>, Download>> encodings_;  // newest last
};

}  // namespace plexus
