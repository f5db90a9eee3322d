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
  return {};
}

}  // namespace

std::vector<std::string> ModelNames() { return {"cnn", "mlp"}; }

std::string BuiltInModelOf(const ModelState& model) {
  for (const std::string& name : ModelNames()) {
    Result<ModelState> layout = ModelState::Create(Layout(name));
    if (layout.ok() && model.CheckSameLayout(*layout).ok()) return name;
  }
  return "";
}

std::map<std::string, std::string> BuiltInModelMetadata(const std::string& name) {
  return {{"plexus.model", name},
          {"plexus.input", "Fashion-MNIST image: 28x28 grayscale, pixels x in 0..255"},
          {"plexus.preprocess", "(x / 255 - 0.2860) / 0.3530"},
          {"plexus.input_shape", name == "cnn" ? "1,28,28" : "784"},
          {"plexus.classes", "T-shirt/top,Trouser,Pullover,Dress,Coat,Sandal,Shirt,Sneaker,Bag,Ankle boot"}};
}

Result<ModelState> InitModel(const std::string& name, uint64_t seed) {
  const std::vector<TensorSpec> layout = Layout(name);
  if (layout.empty()) return InvalidArgumentError("unknown model '" + name + "' (known: cnn, mlp)");
  PLEXUS_ASSIGN_OR_RETURN(ModelState m, ModelState::Create(layout));
  Rng rng = Rng::Derive(seed, 0x1417);
  // Weights and the bias that follows share the weight's fan-in.
  double bound = 1.0;
  for (size_t i = 0; i < m.tensors().size(); ++i) {
    const TensorSlot& t = m.tensors()[i];
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
