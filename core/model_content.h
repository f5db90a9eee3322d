// The pieces of a model's content encoding (the bytes ModelState::ContentSha256 and
// ContentCrc32c cover: a head naming every tensor's name and shape in order, then the float32
// values) for code that sees the values arrive piece by piece and checks them as they land
// (SafetensorsStreamDecoder), rather than in another pass over the finished model. Declared
// apart from model_state.h so that its users do not rebuild with every change to that header.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>

namespace plexus {

class ModelState;

// The CRC-32C of `model`'s content head (its layout, not its values):
// ExtendCrc32c(ContentHeadCrc32c(m), m's value bytes) == m.ContentCrc32c().
uint32_t ContentHeadCrc32c(const ModelState& model);

}  // namespace plexus
