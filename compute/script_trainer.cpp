// The second translation unit with LibTorch (TorchScript modules); the built-in models are in
// torch_trainer.cpp. Both are left out of builds without LibTorch.
#include <torch/script.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "compute/script_model.h"
#include "compute/torch_training.h"
#include "core/rng.h"
#include "core/shape_text.h"

namespace plexus {
namespace {

// The module's federated tensors, in ModelState order: parameters, then floating-point buffers.
struct NamedTensors {
  std::vector<std::string> names;
  std::vector<torch::Tensor> tensors;
  std::vector<bool> is_buffer;
};

NamedTensors Federated(const torch::jit::Module& module) {
  NamedTensors out;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) {
    out.names.push_back(p.name);
    out.tensors.push_back(p.value);
    out.is_buffer.push_back(false);
  }
  for (const auto& b : module.named_buffers(/*recurse=*/true)) {
    if (!b.value.is_floating_point()) continue;  // num_batches_tracked and the like stay local
    out.names.push_back(b.name);
    out.tensors.push_back(b.value);
    out.is_buffer.push_back(true);
  }
  return out;
}

Result<torch::jit::Module> LoadModule(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return NotFoundError("model file '" + path + "' does not exist");
  try {
    torch::jit::Module module = torch::jit::load(path, torch::kCPU);
    return module;
  } catch (const std::exception& e) {
    std::string why = e.what();
    if (const size_t eol = why.find('\n'); eol != std::string::npos) why.resize(eol);
    return InvalidArgumentError("model file '" + path +
                                "' is not a TorchScript module (save one in PyTorch with "
                                "torch.jit.script(model).save(path)): " +
                                why);
  }
}

Status CopyInto(const ModelState& weights, const NamedTensors& into, bool skip_buffers) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < into.tensors.size(); ++i) {
    if (skip_buffers && into.is_buffer[i]) continue;
    const std::span<const float> src = weights.tensor(i);
    torch::Tensor from = torch::from_blob(const_cast<float*>(src.data()), into.tensors[i].sizes(), torch::kFloat32);
    into.tensors[i].copy_(from);  // converts to the module's dtype (float64 modules work too)
  }
  return Status::Ok();
}

void CopyOut(const NamedTensors& from, ModelState* weights, bool skip_buffers) {
  for (size_t i = 0; i < from.tensors.size(); ++i) {
    if (skip_buffers && from.is_buffer[i]) continue;
    torch::Tensor c = from.tensors[i].detach().to(torch::kFloat32).contiguous();
    std::memcpy(weights->tensor(i).data(), c.data_ptr<float>(), weights->tensor(i).size() * sizeof(float));
  }
}

class ScriptTrainer final : public Trainer {
 public:
  ScriptTrainer(ScriptModelInfo info, torch::jit::Module module, ScriptTrainerOptions options)
      : info_(std::move(info)), module_(std::move(module)), options_(options), tensors_(Federated(module_)) {}

  Result<TrainOutcome> Train(const ModelState& start, const DatasetView& data, const TrainOptions& options) override {
    TrainOptions o = options;
    o.join_single_last_batch = true;
    PLEXUS_RETURN_IF_ERROR(Check(start, data));
    PLEXUS_RETURN_IF_ERROR(CheckTrainOptions(o));
    PLEXUS_RETURN_IF_ERROR(Load(start));
    std::vector<torch::Tensor> params;
    for (size_t i = 0; i < tensors_.tensors.size(); ++i) {
      if (!tensors_.is_buffer[i]) params.push_back(tensors_.tensors[i].set_requires_grad(true));
    }
    torch::manual_seed(o.seed);  // dropout and other random layers
    module_.train();
    PLEXUS_ASSIGN_OR_RETURN(
        const double mean_loss,
        torch_training::RunSteps(params, ForwardOn(*data.data), data, o, "model '" + info_.path + "'", objective()));
    TrainOutcome out;
    out.weights = start;
    CopyOut(tensors_, &out.weights, options_.local_buffers);
    if (options_.local_buffers) SaveLocalBuffers();
    out.num_examples = static_cast<int64_t>(data.size());
    out.steps = TotalSteps(o, out.num_examples);
    out.mean_loss = mean_loss;
    return out;
  }

  Result<Evaluation> Evaluate(const ModelState& model, const DatasetView& data) override {
    PLEXUS_RETURN_IF_ERROR(Check(model, data));
    PLEXUS_RETURN_IF_ERROR(Load(model));
    module_.eval();
    return torch_training::EvaluateLogits(ForwardOn(*data.data), data, "model '" + info_.path + "'", objective());
  }

 private:
  torch_training::Objective objective() const {
    return options_.mse         ? torch_training::Objective::kMse
           : options_.next_byte ? torch_training::Objective::kNextByte
                                : torch_training::Objective::kCrossEntropy;
  }

  Status Check(const ModelState& model, const DatasetView& data) const {
    if (!data.data || data.size() == 0) return InvalidArgumentError("no examples to train or evaluate on");
    if (options_.mse && data.data->target_width == 0) {
      return InvalidArgumentError("--loss mse needs real-valued targets: a data file read for regression");
    }
    if (!options_.mse && data.data->target_width > 0) {
      return InvalidArgumentError("the data holds regression targets: train with --loss mse");
    }
    if (options_.next_byte && (data.data->example_shape.size() != 1 || data.data->feature_bytes.empty())) {
      return InvalidArgumentError("--loss next_byte trains on text windows: a text corpus (--data DIR of text files)");
    }
    return model.CheckSameLayout(info_.initial).WithContext("model '" + info_.path + "'");
  }

  // The module's weights from `model`; with local buffers, this trainer's own once it has them.
  Status Load(const ModelState& model) {
    PLEXUS_RETURN_IF_ERROR(CopyInto(model, tensors_, /*skip_buffers=*/false));
    if (local_buffers_) {
      torch::NoGradGuard no_grad;
      for (size_t i = 0, k = 0; i < tensors_.tensors.size(); ++i) {
        if (tensors_.is_buffer[i]) tensors_.tensors[i].copy_((*local_buffers_)[k++]);
      }
    }
    return Status::Ok();
  }

  void SaveLocalBuffers() {
    std::vector<torch::Tensor> kept;
    for (size_t i = 0; i < tensors_.tensors.size(); ++i) {
      if (tensors_.is_buffer[i]) kept.push_back(tensors_.tensors[i].detach().clone());
    }
    local_buffers_ = std::move(kept);
  }

  // The logits for `x`, checked against the data: [batch, classes] with at least as many classes
  // as the data has labels.
  torch_training::Forward ForwardOn(const Dataset& d) {
    return [this, &d](const torch::Tensor& x) { return Forward(x, d); };
  }

  Result<torch::Tensor> Forward(const torch::Tensor& x, const Dataset& d) {
    torch::Tensor logits;
    try {
      logits = module_.forward({options_.next_byte ? x.to(torch::kLong) : x}).toTensor();
    } catch (const std::exception& e) {
      if (x.size(0) == 1 && module_.is_training()) {
        return InvalidArgumentError("model '" + info_.path +
                                    "' cannot train on a batch of one example (BatchNorm needs two): give each "
                                    "client at least two examples: " +
                                    torch_training::FirstLine(e));
      }
      return InvalidArgumentError("model '" + info_.path + "' cannot take examples of shape " +
                                  ShapeText(d.example_shape) + " (batch " + ShapeText(x.sizes().vec()) +
                                  "; set the shape with --input-shape): " + torch_training::FirstLine(e));
    }
    if (options_.mse) {
      if (logits.dim() == 1 && d.target_width == 1) logits = logits.unsqueeze(1);
      if (logits.dim() != 2 || logits.size(0) != x.size(0) || logits.size(1) != d.target_width) {
        return InvalidArgumentError("model '" + info_.path + "' returns " + ShapeText(logits.sizes().vec()) +
                                    " for a batch of " + std::to_string(x.size(0)) + "; the data has " +
                                    std::to_string(d.target_width) + " target(s) per example");
      }
      return logits.to(torch::kFloat32);
    }
    if (options_.next_byte) {
      if (logits.dim() != 3 || logits.size(0) != x.size(0) || logits.size(1) != x.size(1) || logits.size(2) < 256) {
        return InvalidArgumentError("model '" + info_.path + "' returns " + ShapeText(logits.sizes().vec()) + " for " +
                                    ShapeText(x.sizes().vec()) +
                                    " bytes; a language model returns [batch, t, 256] logits of each next byte");
      }
      return logits.to(torch::kFloat32);
    }
    if (logits.dim() != 2 || logits.size(0) != x.size(0)) {
      return InvalidArgumentError("model '" + info_.path + "' returns " + ShapeText(logits.sizes().vec()) +
                                  " for a batch of " + std::to_string(x.size(0)) +
                                  "; a classifier returns [batch, classes] logits");
    }
    if (logits.size(1) < d.num_classes) {
      return InvalidArgumentError("model '" + info_.path + "' has " + std::to_string(logits.size(1)) +
                                  " outputs, but the data has labels up to " + std::to_string(d.num_classes - 1) +
                                  " (" + std::to_string(d.num_classes) + " classes)");
    }
    return logits.to(torch::kFloat32);
  }

  const ScriptModelInfo info_;
  torch::jit::Module module_;
  const ScriptTrainerOptions options_;
  NamedTensors tensors_;
  std::optional<std::vector<torch::Tensor>> local_buffers_;
};

}  // namespace

Result<ScriptModelInfo> ReadScriptModel(const std::string& path) {
  PLEXUS_ASSIGN_OR_RETURN(torch::jit::Module module, LoadModule(path));
  const NamedTensors federated = Federated(module);
  std::vector<TensorSpec> specs;
  ScriptModelInfo info;
  info.path = path;
  bool any_parameter = false;
  for (size_t i = 0; i < federated.tensors.size(); ++i) {
    const torch::Tensor& t = federated.tensors[i];
    if (!t.is_floating_point()) {
      return InvalidArgumentError("model file '" + path + "': parameter '" + federated.names[i] +
                                  "' is not floating-point");
    }
    any_parameter |= !federated.is_buffer[i];
    specs.push_back({federated.names[i], t.sizes().vec()});
    if (federated.is_buffer[i]) info.buffers.push_back(federated.names[i]);
  }
  if (!any_parameter) return InvalidArgumentError("model file '" + path + "' has no parameters to train");
  PLEXUS_ASSIGN_OR_RETURN(info.initial, ModelState::Create(specs));
  CopyOut(federated, &info.initial, /*skip_buffers=*/false);
  PLEXUS_RETURN_IF_ERROR(
      info.initial.CheckFinite().WithContext("model file '" + path + "' holds non-finite initial weights"));
  info.name = ScriptModelNameOf(info.initial);
  return info;
}

std::string DescribeLayoutDifference(const ModelState& here, const ModelState& there) {
  std::map<std::string, std::vector<int64_t>> theirs;
  for (const TensorSlot& t : there.tensors()) theirs[t.name] = t.shape;
  std::set<std::string> ours;
  std::string out;
  const auto add = [&out](const std::string& s) {
    if (out.size() < 400) out += (out.empty() ? "" : "; ") + s;
  };
  for (const TensorSlot& t : here.tensors()) {
    ours.insert(t.name);
    auto it = theirs.find(t.name);
    if (it == theirs.end()) {
      add(t.name + " only here");
    } else if (it->second != t.shape) {
      add(t.name + ": " + ShapeText(t.shape) + " here, " + ShapeText(it->second) + " there");
    }
  }
  for (const TensorSlot& t : there.tensors()) {
    if (!ours.count(t.name)) add(t.name + " only there");
  }
  return out.empty() ? "same tensors in another order" : out;
}

Result<std::unique_ptr<Trainer>> MakeScriptTrainer(const std::string& path, const ScriptTrainerOptions& options) {
  if (options.threads < 1) return InvalidArgumentError("threads must be at least 1");
  PLEXUS_ASSIGN_OR_RETURN(ScriptModelInfo info, ReadScriptModel(path));
  PLEXUS_ASSIGN_OR_RETURN(torch::jit::Module module, LoadModule(path));
  // LibTorch's own threads run the element-wise work; OpenBLAS gets one, so that a GEMM issued
  // by each of them does not start more threads than there are cores (measured in
  // bench/run_train_bench.sh: two threads each were three times slower than one on 2 cores), and
  // results do not depend on the machine's CPU count.
  torch::set_num_threads(options.threads);
  torch_training::SetOpenBlasThreads(1);
  return std::unique_ptr<Trainer>(std::make_unique<ScriptTrainer>(std::move(info), std::move(module), options));
}

Status WriteScriptModel(const std::string& module_path, const ModelState& weights, const std::string& out,
                        const std::map<std::string, std::string>& metadata) {
  PLEXUS_ASSIGN_OR_RETURN(ScriptModelInfo info, ReadScriptModel(module_path));
  if (Status same = weights.CheckSameLayout(info.initial); !same.ok()) {
    return InvalidArgumentError("the federation's model does not fit '" + module_path +
                                "': " + DescribeLayoutDifference(info.initial, weights));
  }
  PLEXUS_ASSIGN_OR_RETURN(torch::jit::Module module, LoadModule(module_path));
  PLEXUS_RETURN_IF_ERROR(CopyInto(weights, Federated(module), /*skip_buffers=*/false));
  nlohmann::json json = nlohmann::json::object();
  for (const auto& [key, value] : metadata) json[key] = value;
  try {
    torch::jit::ExtraFilesMap extra{{"plexus.json", json.dump()}};
    const std::string tmp = out + ".tmp";
    module.save(tmp, extra);
    std::filesystem::rename(tmp, out);
  } catch (const std::exception& e) {
    return UnavailableError("cannot write '" + out + "': " + torch_training::FirstLine(e));
  }
  return Status::Ok();
}

}  // namespace plexus
