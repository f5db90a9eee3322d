// The built-in models, described without LibTorch: their tensor names and shapes (named as a
// PyTorch module of the same structure would name them, so exported files load in PyTorch) and
// a seeded initialization matching PyTorch's defaults (uniform in +-1/sqrt(fan_in)).
//   mlp  784-200-10, ReLU                      (159,010 parameters)
//   cnn  conv3x3(32)-pool-conv3x3(64)-pool-fc128-fc10, ReLU (421,642 parameters)
//   tinylm  a byte-level causal transformer (867,072 parameters; kTinyLm): token and learned
//        position embeddings, pre-norm blocks of multi-head causal self-attention and a GELU MLP,
//        a final LayerNorm and an untied head over the 256 byte values. Its data are text windows
//        (compute/text_corpus.h); embeddings start at N(0, 0.02), LayerNorms at the identity.
// Stateless functions; thread-safe.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/model_state.h"
#include "core/status.h"

namespace plexus {

std::vector<std::string> ModelNames();

// tinylm's shape. `context` is kTextContext (compute/text_corpus.h).
struct TinyLmShape {
  int64_t vocabulary = 256;
  int64_t context = 64;
  int64_t width = 128;
  int64_t layers = 4;
  int64_t heads = 4;
};
inline constexpr TinyLmShape kTinyLm{};

// True for the built-in language model ("tinylm"): it reads text windows and reports its loss per
// predicted byte (bits per byte = loss / ln 2).
bool IsLanguageModel(const std::string& name);

// InvalidArgument for an unknown name (listing the known ones).
Result<ModelState> InitModel(const std::string& name, uint64_t seed);

// The built-in model with `model`'s tensor layout ("mlp", "cnn", "tinylm"), or empty.
std::string BuiltInModelOf(const ModelState& model);

// What a user of a built-in model needs outside Plexus, as safetensors metadata: its input
// (Fashion-MNIST images, 28x28, pixels 0..255), the preprocessing the model was trained with
// ("(x / 255 - 0.2860) / 0.3530"), the input shape it takes and its ten classes in label order.
std::map<std::string, std::string> BuiltInModelMetadata(const std::string& name);

}  // namespace plexus
