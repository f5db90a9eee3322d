// Reading and writing models in the safetensors format (F32 tensors only), so models move to and
// from PyTorch (`safetensors.torch.load_file`). The byte layout: an 8-byte little-endian header
// length, a JSON header naming each tensor's dtype, shape and data offsets, then the raw data.
// Plexus keeps its own tensor order in the data section and stores the model version in
// `__metadata__["plexus.version"]`. Decoding validates every size before touching memory.
// Stateless functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "core/model_state.h"
#include "core/status.h"

namespace plexus {

// Largest header accepted when decoding; larger headers are refused as malformed.
inline constexpr size_t kMaxSafetensorsHeaderBytes = 16 << 20;

std::string EncodeSafetensors(const ModelState& model);

// InvalidArgument on malformed bytes, unsupported dtypes or inconsistent offsets.
Result<ModelState> DecodeSafetensors(std::string_view bytes);

// NotFound when the file is missing; InvalidArgument when it is malformed.
Result<ModelState> ReadSafetensorsFile(const std::string& path);
Status WriteSafetensorsFile(const std::string& path, const ModelState& model);

}  // namespace plexus
