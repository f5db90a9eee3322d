// The built-in models, described without LibTorch: their tensor names and shapes (named as a
// PyTorch module of the same structure would name them, so exported files load in PyTorch) and
// a seeded initialization matching PyTorch's defaults (uniform in +-1/sqrt(fan_in)).
//   mlp  784-200-10, ReLU                      (159,010 parameters)
//   cnn  conv3x3(32)-pool-conv3x3(64)-pool-fc128-fc10, ReLU (421,642 parameters)
// Stateless functions; thread-safe.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/model_state.h"
#include "core/status.h"

namespace plexus {

std::vector<std::string> ModelNames();

// InvalidArgument for an unknown name (listing the known ones).
Result<ModelState> InitModel(const std::string& name, uint64_t seed);

// The built-in model with `model`'s tensor layout ("mlp", "cnn"), or empty.
std::string BuiltInModelOf(const ModelState& model);

// What a user of a built-in model needs outside Plexus, as safetensors metadata: its input
// (Fashion-MNIST images, 28x28, pixels 0..255), the preprocessing the model was trained with
// ("(x / 255 - 0.2860) / 0.3530"), the input shape it takes and its ten classes in label order.
std::map<std::string, std::string> BuiltInModelMetadata(const std::string& name);

}  // namespace plexus
