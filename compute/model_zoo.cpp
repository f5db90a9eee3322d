#include "compute/model_zoo.h"

#include <cmath>

#include "core/rng.h"

namespace plexus {
namespace {

std::vector<TensorSpec> Layout(const std::string& name) {
  if (name == "mlp") {
    return {{"fc1.weight", {200, 784}}, {"fc1.bias", {200}}, {"fc2.weight", {10, 200}}, {"fc2.bias", {10}}};
  }
  if (name == "cnn") {
    return {
        {"conv1.weight", {32, 1, 3, 3}}, {"conv1.bias", {32}}, {"conv2.weight", {64, 32, 3, 3}}, {"conv2.bias", {64}},
        {"fc1.weight", {128, 3136}},     {"fc1.bias", {128}},  {"fc2.weight", {10, 128}},        {"fc2.bias", {10}}};
  }
  if (name == "tinylm") {
    const int64_t d = kTinyLm.width, v = kTinyLm.vocabulary;
    std::vector<TensorSpec> t = {{"tok_emb.weight", {v, d}}, {"pos_emb", {kTinyLm.context, d}}};
    for (int64_t l = 0; l < kTinyLm.layers; ++l) {
      const std::string b = "blocks." + std::to_string(l) + ".";
      t.push_back({b + "ln1.weight", {d}});
      t.push_back({b + "ln1.bias", {d}});
      t.push_back({b + "attn.qkv.weight", {3 * d, d}});
      t.push_back({b + "attn.qkv.bias", {3 * d}});
      t.push_back({b + "attn.proj.weight", {d, d}});
      t.push_back({b + "attn.proj.bias", {d}});
      t.push_back({b + "ln2.weight", {d}});
      t.push_back({b + "ln2.bias", {d}});
      t.push_back({b + "mlp.fc1.weight", {4 * d, d}});
      t.push_back({b + "mlp.fc1.bias", {4 * d}});
      t.push_back({b + "mlp.fc2.weight", {d, 4 * d}});
      t.push_back({b + "mlp.fc2.bias", {d}});
    }
    t.push_back({"ln_f.weight", {d}});
    t.push_back({"ln_f.bias", {d}});
    t.push_back({"head.weight", {v, d}});
    return t;
  }
  return {};
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

bool IsLanguageModel(const std::string& name) { return name == "tinylm"; }

std::vector<std::string> ModelNames() { return {"cnn", "mlp", "tinylm"}; }

std::string BuiltInModelOf(const ModelState& model) {
  for (const std::string& name : ModelNames()) {
    Result<ModelState> layout = ModelState::Create(Layout(name));
    if (layout.ok() && model.CheckSameLayout(*layout).ok()) return name;
  }
  return "";
}

std::map<std::string, std::string> BuiltInModelMetadata(const std::string& name) {
  if (IsLanguageModel(name)) {
    return {
        {"plexus.model", name},
        {"plexus.input", "byte-level text: " + std::to_string(kTinyLm.context) +
                             " bytes (int64 token ids 0..255) in, logits over the next byte at each position out"},
        {"plexus.input_shape", std::to_string(kTinyLm.context)},
        {"plexus.architecture", "causal transformer: " + std::to_string(kTinyLm.layers) + " pre-norm blocks, width " +
                                    std::to_string(kTinyLm.width) + ", " + std::to_string(kTinyLm.heads) +
                                    " heads, GELU (tanh) MLP of 4x width, learned positions, untied head"}};
  }
  return {{"plexus.model", name},
          {"plexus.input", "Fashion-MNIST image: 28x28 grayscale, pixels x in 0..255"},
          {"plexus.preprocess", "(x / 255 - 0.2860) / 0.3530"},
          {"plexus.input_shape", name == "cnn" ? "1,28,28" : "784"},
          {"plexus.classes", "T-shirt/top,Trouser,Pullover,Dress,Coat,Sandal,Shirt,Sneaker,Bag,Ankle boot"}};
}

Result<ModelState> InitModel(const std::string& name, uint64_t seed) {
  const std::vector<TensorSpec> layout = Layout(name);
  if (layout.empty()) return InvalidArgumentError("unknown model '" + name + "' (known: cnn, mlp, tinylm)");
  PLEXUS_ASSIGN_OR_RETURN(ModelState m, ModelState::Create(layout));
  Rng rng = Rng::Derive(seed, 0x1417);
  // Weights and the bias that follows share the weight's fan-in.
  double bound = 1.0;
  for (size_t i = 0; i < m.tensors().size(); ++i) {
    const TensorSlot& t = m.tensors()[i];
    // tinylm: embeddings N(0, 0.02) as GPT-2 starts them, LayerNorm at its identity.
    if (t.name == "tok_emb.weight" || t.name == "pos_emb") {
      for (float& x : m.tensor(i)) x = static_cast<float>(0.02 * rng.Normal());
      continue;
    }
    if (EndsWith(t.name, "ln1.weight") || EndsWith(t.name, "ln2.weight") || t.name == "ln_f.weight" ||
        EndsWith(t.name, "ln1.bias") || EndsWith(t.name, "ln2.bias") || t.name == "ln_f.bias") {
      const float value = EndsWith(t.name, "weight") ? 1.0f : 0.0f;
      for (float& x : m.tensor(i)) x = value;
      continue;
    }
    if (t.shape.size() > 1) {
      int64_t fan_in = 1;
      for (size_t d = 1; d < t.shape.size(); ++d) fan_in *= t.shape[d];
      bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    }
    for (float& x : m.tensor(i)) x = static_cast<float>((2.0 * rng.Uniform() - 1.0) * bound);
  }
  return m;
}

}  // namespace plexus
