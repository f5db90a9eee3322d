// A model's float32 values as the bytes they are in memory: what a safetensors file, an upload, a
// download and a peer's model frames carry after their headers, and what the content hashes cover
// after the head. Little-endian on every platform Plexus builds for, as safetensors requires (the
// writers send these bytes as they are). A view: valid while the model lives and is not resized.
// Declared apart from model_state.h so that its users do not rebuild with every change to that
// header. Thread-safe as the model's const accessors are.
#pragma once

#include <string_view>

#include "core/model_state.h"

namespace plexus {

inline std::string_view ValueBytes(const ModelState& model) {
  return std::string_view(reinterpret_cast<const char*>(model.data().data()), model.num_bytes());
}

}  // namespace plexus
