#include "client/upload_payload.h"

#include <utility>

#include "core/safetensors.h"

namespace plexus {

std::shared_ptr<const UploadPayload> UploadPayload::Of(std::string bytes) {
  std::shared_ptr<UploadPayload> p(new UploadPayload());
  p->head_ = std::move(bytes);
  return p;
}

std::shared_ptr<const UploadPayload> UploadPayload::Of(std::shared_ptr<const std::string> bytes) {
  std::shared_ptr<UploadPayload> p(new UploadPayload());
  p->shared_ = std::move(bytes);
  p->body_ = *p->shared_;
  return p;
}

std::shared_ptr<const UploadPayload> UploadPayload::SafetensorsOf(ModelState delta) {
  std::shared_ptr<UploadPayload> p(new UploadPayload());
  p->head_ = SafetensorsPrefix(delta);
  p->model_.emplace(std::move(delta));
  // The values' address is taken after the move: the buffer moved with it.
  p->body_ = std::string_view(reinterpret_cast<const char*>(p->model_->data().data()), p->model_->num_bytes());
  return p;
}

std::string UploadPayload::Sha256Hex() const { return plexus::Sha256Hex({head_, body_}); }

std::string UploadPayload::ToString() const {
  std::string out;
  out.reserve(size());
  out += head_;
  out += body_;
  return out;
}

}  // namespace plexus
