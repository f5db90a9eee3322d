// Payload: bytes that go to a wire or a file as a head followed by a body, together with whatever
// owns the body's memory. A model's float32 safetensors encoding is its prefix (the head) followed
// by the model's own values (the body), so that the values are sent or written from the model's
// memory instead of from a copy: a client's update (the delta it trained), a model version the
// server serves for download (the published model itself). Encoding them into one string first
// cost a model-sized copy each, into memory the kernel often had to zero first (at 40 MB every
// such string was a fresh mapping), and one more model-sized buffer held.
// Immutable once made; thread-safe to read; shared (std::shared_ptr<const Payload>) by its
// makers and the transports, which may hold it after a call returns.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/model_state.h"

namespace plexus {

class Payload {
 public:
  // The bytes of `bytes` (a codec's output, a bundle, bytes read back from disk).
  static std::shared_ptr<const Payload> Of(std::string bytes);
  // The bytes of `*bytes`, shared, not copied. REQUIRES: bytes != nullptr.
  static std::shared_ptr<const Payload> Of(std::shared_ptr<const std::string> bytes);
  // EncodeSafetensors(model)'s bytes: its prefix, then the values where `model` keeps them.
  static std::shared_ptr<const Payload> SafetensorsOf(ModelState model);
  // The same for a model others share, which must not change while the payload lives (a
  // published version). REQUIRES: model != nullptr.
  static std::shared_ptr<const Payload> SafetensorsOf(std::shared_ptr<const ModelState> model);

  std::string_view head() const { return head_; }
  std::string_view body() const { return body_; }
  size_t size() const { return head_.size() + body_.size(); }
  // Lower-case hex SHA-256 of head then body.
  std::string Sha256Hex() const;
  // Head and body in one string, a copy (tests, small payloads).
  std::string ToString() const;

  Payload(const Payload&) = delete;
  Payload& operator=(const Payload&) = delete;

 private:
  Payload() = default;

  std::string head_;
  std::optional<ModelState> model_;    // owns body_ for SafetensorsOf(ModelState)
  std::shared_ptr<const void> owner_;  // owns body_ for the shared forms
  std::string_view body_;
};

}  // namespace plexus
