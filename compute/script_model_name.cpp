#include <string>
#include <vector>

#include "compute/script_model.h"

namespace plexus {

std::string ScriptModelNameOf(const ModelState& layout) {
  std::string text;
  for (const TensorSlot& t : layout.tensors()) {
    text += t.name + "[";
    for (size_t i = 0; i < t.shape.size(); ++i) text += (i ? ", " : "") + std::to_string(t.shape[i]);
    text += "];";
  }
  return kScriptModelPrefix + Sha256Hex(text).substr(0, 16);  // the digest's first 8 bytes
}

}  // namespace plexus
