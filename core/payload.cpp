#include "core/payload.h"

#include <utility>

#include "core/safetensors.h"
#include "core/value_bytes.h"

namespace plexus {

std::shared_ptr<const Payload> Payload::Of(std::string bytes) {
  std::shared_ptr<Payload> p(new Payload());
  p->head_ = std::move(bytes);
  return p;
}

std::shared_ptr<const Payload> Payload::Of(std::shared_ptr<const std::string> bytes) {
  std::shared_ptr<Payload> p(new Payload());
  p->body_ = *bytes;
  p->owner_ = std::move(bytes);
  return p;
}

std::shared_ptr<const Payload> Payload::SafetensorsOf(ModelState model) {
  std::shared_ptr<Payload> p(new Payload());
  p->head_ = SafetensorsPrefix(model);
  p->model_.emplace(std::move(model));
  p->body_ = ValueBytes(*p->model_);  // taken after the move: the buffer moved with it
  return p;
}

std::shared_ptr<const Payload> Payload::SafetensorsOf(std::shared_ptr<const ModelState> model) {
  std::shared_ptr<Payload> p(new Payload());
  p->head_ = SafetensorsPrefix(*model);
  p->body_ = ValueBytes(*model);
  p->owner_ = std::move(model);
  return p;
}

std::string Payload::Sha256Hex() const { return plexus::Sha256Hex({head_, body_}); }

std::string Payload::ToString() const {
  std::string out;
  out.reserve(size());
  out += head_;
  out += body_;
  return out;
}

}  // namespace plexus
