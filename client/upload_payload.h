// UploadPayload: the bytes of one update as a client sends them to the server (and keeps them in
// its state directory until the server answers), held as a head followed by a body, together
// with whatever owns the body's memory. A float32 update is the delta's safetensors prefix (the
// head) followed by the delta's own values (the body), so that the values go to the wire and to
// the disk from the model's memory: encoding them into one string first cost a copy of every
// update (about 7% of a client's samples at 4 MB, 13% at 40 MB, where each payload string was
// also fresh memory the kernel had to zero) and one more model-sized buffer per client.
// Immutable once made; thread-safe to read; shared (std::shared_ptr<const UploadPayload>) by
// the client and the transport, which may hold it after a call returns.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/model_state.h"

namespace plexus {

class UploadPayload {
 public:
  // The bytes of `bytes` (a codec's output, a bundle, a kept payload read back from disk).
  static std::shared_ptr<const UploadPayload> Of(std::string bytes);
  // The bytes of `*bytes`, shared, not copied. REQUIRES: bytes != nullptr.
  static std::shared_ptr<const UploadPayload> Of(std::shared_ptr<const std::string> bytes);
  // EncodeSafetensors(delta)'s bytes: its prefix, then the values where `delta` keeps them.
  static std::shared_ptr<const UploadPayload> SafetensorsOf(ModelState delta);

  std::string_view head() const { return head_; }
  std::string_view body() const { return body_; }
  size_t size() const { return head_.size() + body_.size(); }
  // Lower-case hex SHA-256 of head then body (what a resumed upload names).
  std::string Sha256Hex() const;
  // Head and body in one string, a copy (tests, small payloads).
  std::string ToString() const;

  UploadPayload(const UploadPayload&) = delete;
  UploadPayload& operator=(const UploadPayload&) = delete;

 private:
  UploadPayload() = default;

  std::string head_;
  std::optional<ModelState> model_;            // owns body_ for SafetensorsOf
  std::shared_ptr<const std::string> shared_;  // owns body_ for Of(shared)
  std::string_view body_;
};

}  // namespace plexus
