// One of the two translation units that include LibTorch (script_trainer.cpp is the other): it
// dominates build time, so keep them few.
#include <torch/torch.h>

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <tuple>

#include "compute/model_zoo.h"
#include "compute/torch_training.h"
#include "compute/trainer.h"
#include "core/rng.h"

namespace plexus {
namespace {

namespace F = torch::nn::functional;

// params are in model_zoo.h order.
torch::Tensor ForwardMlp(const std::vector<torch::Tensor>& p, const torch::Tensor& x) {
  torch::Tensor h = torch::relu(F::linear(x.view({x.size(0), -1}), p[0], p[1]));
  return F::linear(h, p[2], p[3]);
}

torch::Tensor ForwardCnn(const std::vector<torch::Tensor>& p, const torch::Tensor& x) {
  torch::Tensor h = x.view({x.size(0), 1, 28, 28});
  h = torch::max_pool2d(torch::relu(torch::conv2d(h, p[0], p[1], 1, 1)), 2);
  h = torch::max_pool2d(torch::relu(torch::conv2d(h, p[2], p[3], 1, 1)), 2);
  h = torch::relu(F::linear(h.flatten(1), p[4], p[5]));
  return F::linear(h, p[6], p[7]);
}

torch::Tensor LayerNorm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  return F::layer_norm(x, F::LayerNormFuncOptions({x.size(-1)}).weight(weight).bias(bias));
}

// tinylm (model_zoo.h): x [batch, T] byte values as floats -> logits [batch, T, 256] for the next
// byte at each position. Attention is written out (this LibTorch has no fused kernel).
torch::Tensor ForwardTinyLm(const std::vector<torch::Tensor>& p, const torch::Tensor& x) {
  if (x.dim() != 2 || x.size(1) > kTinyLm.context) {
    throw std::invalid_argument("tinylm reads windows of at most " + std::to_string(kTinyLm.context) + " bytes");
  }
  const int64_t batch = x.size(0), t = x.size(1), d = kTinyLm.width, heads = kTinyLm.heads;
  torch::Tensor h = F::embedding(x.to(torch::kLong), p[0]) + p[1].slice(0, 0, t);
  const torch::Tensor future = torch::ones({t, t}, torch::kBool).triu(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d / heads));
  size_t i = 2;
  for (int64_t l = 0; l < kTinyLm.layers; ++l, i += 12) {
    std::vector<torch::Tensor> qkv = F::linear(LayerNorm(h, p[i], p[i + 1]), p[i + 2], p[i + 3]).chunk(3, -1);
    for (torch::Tensor& part : qkv) part = part.view({batch, t, heads, d / heads}).transpose(1, 2);
    torch::Tensor att = torch::matmul(qkv[0], qkv[1].transpose(-2, -1)) * scale;
    att = torch::softmax(att.masked_fill(future, -std::numeric_limits<float>::infinity()), -1);
    torch::Tensor y = torch::matmul(att, qkv[2]).transpose(1, 2).contiguous().view({batch, t, d});
    h = h + F::linear(y, p[i + 4], p[i + 5]);
    torch::Tensor m = F::gelu(F::linear(LayerNorm(h, p[i + 6], p[i + 7]), p[i + 8], p[i + 9]),
                              F::GELUFuncOptions().approximate("tanh"));
    h = h + F::linear(m, p[i + 10], p[i + 11]);
  }
  return F::linear(LayerNorm(h, p[i], p[i + 1]), p[i + 2]);
}

class TorchTrainer final : public Trainer {
 public:
  TorchTrainer(std::string model_name, ModelState layout)
      : model_name_(std::move(model_name)), layout_(std::move(layout)) {
    forward_ = model_name_ == "cnn" ? &ForwardCnn : IsLanguageModel(model_name_) ? &ForwardTinyLm : &ForwardMlp;
    objective_ =
        IsLanguageModel(model_name_) ? torch_training::Objective::kNextByte : torch_training::Objective::kCrossEntropy;
  }

  Result<TrainOutcome> Train(const ModelState& start, const DatasetView& data, const TrainOptions& o) override {
    PLEXUS_RETURN_IF_ERROR(Check(start, data));
    PLEXUS_RETURN_IF_ERROR(CheckTrainOptions(o));
    std::vector<torch::Tensor> params = ToTensors(start, /*requires_grad=*/true);
    PLEXUS_ASSIGN_OR_RETURN(
        const double mean_loss,
        torch_training::RunSteps(params, ForwardOf(params), data, o, "model '" + model_name_ + "'", objective_));
    TrainOutcome out;
    out.weights = start;
    CopyBack(params, out.weights);
    out.num_examples = static_cast<int64_t>(data.size());
    out.steps = TotalSteps(o, out.num_examples);
    out.mean_loss = mean_loss;
    return out;
  }

  Result<Evaluation> Evaluate(const ModelState& model, const DatasetView& data) override {
    PLEXUS_RETURN_IF_ERROR(Check(model, data));
    std::vector<torch::Tensor> params = ToTensors(model, false);
    return torch_training::EvaluateLogits(ForwardOf(params), data, "model '" + model_name_ + "'", objective_);
  }

 private:
  torch_training::Forward ForwardOf(const std::vector<torch::Tensor>& params) const {
    return [&params, f = forward_](const torch::Tensor& x) -> Result<torch::Tensor> { return f(params, x); };
  }

  Status Check(const ModelState& model, const DatasetView& data) const {
    if (!data.data || data.size() == 0) return InvalidArgumentError("no examples to train or evaluate on");
    if (IsLanguageModel(model_name_)) {
      if (data.data->example_shape != std::vector<int64_t>{kTinyLm.context + 1} || data.data->feature_bytes.empty()) {
        return InvalidArgumentError("tinylm takes text windows of " + std::to_string(kTinyLm.context + 1) +
                                    " bytes (a text corpus: --data DIR of plain-text files)");
      }
    } else if (data.data->features_per_example() != 784) {
      return InvalidArgumentError("the built-in image models take 28x28 images");
    }
    return model.CheckSameLayout(layout_).WithContext("model '" + model_name_ + "'");
  }

  static std::vector<torch::Tensor> ToTensors(const ModelState& m, bool requires_grad) {
    std::vector<torch::Tensor> out;
    for (size_t i = 0; i < m.tensors().size(); ++i) {
      auto span = m.tensor(i);
      torch::Tensor t =
          torch::from_blob(const_cast<float*>(span.data()), m.tensors()[i].shape, torch::kFloat32).clone();
      out.push_back(t.set_requires_grad(requires_grad));
    }
    return out;
  }

  static void CopyBack(const std::vector<torch::Tensor>& params, ModelState& m) {
    for (size_t i = 0; i < params.size(); ++i) {
      torch::Tensor c = params[i].detach().contiguous();
      std::memcpy(m.tensor(i).data(), c.data_ptr<float>(), m.tensor(i).size() * sizeof(float));
    }
  }

  const std::string model_name_;
  const ModelState layout_;
  torch::Tensor (*forward_)(const std::vector<torch::Tensor>&, const torch::Tensor&);
  torch_training::Objective objective_;
};

}  // namespace

namespace torch_training {

std::string FirstLine(const std::exception& e) {
  std::string why = e.what();
  if (const size_t eol = why.find('\n'); eol != std::string::npos) why.resize(eol);
  return why;
}

std::pair<torch::Tensor, torch::Tensor> Batch(const Dataset& d, const std::vector<uint32_t>& idx, int64_t b, int64_t e,
                                              const uint8_t* label_map) {
  const int64_t per = d.features_per_example();
  std::vector<int64_t> shape{e - b};
  shape.insert(shape.end(), d.example_shape.begin(), d.example_shape.end());
  torch::Tensor x = torch::empty(shape, torch::kFloat32);
  float* xp = x.data_ptr<float>();
  for (int64_t i = b; i < e; ++i) {
    const uint32_t k = idx[static_cast<size_t>(i)];
    d.CopyExample(k, xp + (i - b) * per);
  }
  if (d.target_width > 0) {
    const int64_t width = d.target_width;
    torch::Tensor t = torch::empty({e - b, width}, torch::kFloat32);
    float* tp = t.data_ptr<float>();
    for (int64_t i = b; i < e; ++i) {
      const uint32_t k = idx[static_cast<size_t>(i)];
      std::memcpy(tp + (i - b) * width, d.targets.data() + static_cast<size_t>(k) * width, width * sizeof(float));
    }
    return {x, t};
  }
  torch::Tensor y = torch::empty({e - b}, torch::kInt64);
  int64_t* yp = y.data_ptr<int64_t>();
  for (int64_t i = b; i < e; ++i) {
    const uint32_t k = idx[static_cast<size_t>(i)];
    yp[i - b] = label_map ? label_map[d.labels[k]] : d.labels[k];
  }
  return {x, y};
}

namespace {

// AdamW (Loshchilov and Hutter, as torch.optim.AdamW computes it: betas 0.9 and 0.999, eps 1e-8,
// decoupled weight decay), its two moments held in one flat buffer each so that they go back to
// the client's OptimizerState, which carries them to its next task, in one copy.
class AdamW {
 public:
  AdamW(const std::vector<torch::Tensor>& params, const TrainOptions& o)
      : params_(params), lr_(o.learning_rate), decay_(o.weight_decay), state_(o.optimizer_state) {
    int64_t total = 0;
    for (const torch::Tensor& p : params_) total += p.numel();
    const auto size = static_cast<size_t>(total);
    if (state_ && state_->steps > 0 && state_->first_moment.size() == size && state_->second_moment.size() == size) {
      first_ = torch::from_blob(state_->first_moment.data(), {total}, torch::kFloat32).clone();
      second_ = torch::from_blob(state_->second_moment.data(), {total}, torch::kFloat32).clone();
      steps_ = state_->steps;
    } else {  // no state yet, or one of another model: start afresh
      first_ = torch::zeros({total}, torch::kFloat32);
      second_ = torch::zeros({total}, torch::kFloat32);
    }
    int64_t at = 0;
    for (const torch::Tensor& p : params_) {
      first_views_.push_back(first_.narrow(0, at, p.numel()).view(p.sizes()));
      second_views_.push_back(second_.narrow(0, at, p.numel()).view(p.sizes()));
      at += p.numel();
    }
  }

  void ZeroGrad() {
    for (const torch::Tensor& p : params_) {
      if (p.grad().defined()) p.mutable_grad().zero_();
    }
  }

  void Step() {
    torch::NoGradGuard no_grad;
    ++steps_;
    const double correction1 = 1.0 - std::pow(kBeta1, static_cast<double>(steps_));
    const double correction2 = 1.0 - std::pow(kBeta2, static_cast<double>(steps_));
    for (size_t i = 0; i < params_.size(); ++i) {
      torch::Tensor p = params_[i];
      const torch::Tensor& g = p.grad();
      if (!g.defined()) continue;
      p.mul_(1.0 - lr_ * decay_);
      first_views_[i].mul_(kBeta1).add_(g, 1.0 - kBeta1);
      second_views_[i].mul_(kBeta2).addcmul_(g, g, 1.0 - kBeta2);
      const torch::Tensor denominator = (second_views_[i].sqrt() / std::sqrt(correction2)).add_(kEpsilon);
      p.addcdiv_(first_views_[i], denominator, -lr_ / correction1);
    }
  }

  // Hands the moments back to the client's state (after a task that finished).
  void Save() const {
    if (!state_) return;
    const auto size = static_cast<size_t>(first_.numel());
    state_->first_moment.resize(size);
    state_->second_moment.resize(size);
    std::memcpy(state_->first_moment.data(), first_.data_ptr<float>(), size * sizeof(float));
    std::memcpy(state_->second_moment.data(), second_.data_ptr<float>(), size * sizeof(float));
    state_->steps = steps_;
  }

 private:
  static constexpr double kBeta1 = 0.9, kBeta2 = 0.999, kEpsilon = 1e-8;
  std::vector<torch::Tensor> params_;
  const double lr_, decay_;
  OptimizerState* state_;
  torch::Tensor first_, second_;
  std::vector<torch::Tensor> first_views_, second_views_;
  int64_t steps_ = 0;
};

}  // namespace

std::pair<torch::Tensor, torch::Tensor> NextByteTargets(const torch::Tensor& windows) {
  const int64_t t = windows.size(1) - 1;
  return {windows.slice(1, 0, t), windows.slice(1, 1, t + 1).to(torch::kLong)};
}

Result<double> RunSteps(const std::vector<torch::Tensor>& params, const Forward& forward, const DatasetView& data,
                        const TrainOptions& o, const std::string& what, Objective objective) {
  std::vector<torch::Tensor> anchor;
  if (o.prox_mu > 0) {
    for (const torch::Tensor& p : params) anchor.push_back(p.detach().clone());
  }
  std::optional<torch::optim::SGD> sgd;
  std::optional<AdamW> adamw;
  if (o.optimizer == "adamw") {
    adamw.emplace(params, o);
  } else {
    sgd.emplace(params, torch::optim::SGDOptions(o.learning_rate).momentum(o.momentum));
  }
  const auto n = static_cast<int64_t>(data.size());
  const int64_t steps_per_epoch = StepsPerEpoch(o, n);
  const int64_t total_steps = TotalSteps(o, n);
  std::vector<uint32_t> order = data.indices;
  Rng rng(o.seed);
  double loss_sum = 0.0;
  try {
    for (int64_t step = 0; step < total_steps; ++step) {
      if (o.before_step) PLEXUS_RETURN_IF_ERROR(o.before_step(step));
      const int64_t in_epoch = step % steps_per_epoch;
      if (in_epoch == 0) rng.Shuffle(std::span<uint32_t>(order));
      const auto [b, e] = BatchRange(o, n, in_epoch);
      auto [x, y] = Batch(*data.data, order, b, e, data.label_map);
      if (objective == Objective::kNextByte) std::tie(x, y) = NextByteTargets(x);
      if (adamw) {
        adamw->ZeroGrad();
      } else {
        sgd->zero_grad();
      }
      PLEXUS_ASSIGN_OR_RETURN(torch::Tensor logits, forward(x));
      torch::Tensor loss = objective == Objective::kMse ? F::mse_loss(logits, y)
                           : objective == Objective::kNextByte
                               ? F::cross_entropy(logits.reshape({-1, logits.size(-1)}), y.reshape({-1}))
                               : F::cross_entropy(logits, y);
      if (o.prox_mu > 0) {
        torch::Tensor prox = torch::zeros({});
        for (size_t i = 0; i < params.size(); ++i) prox = prox + (params[i] - anchor[i]).pow(2).sum();
        loss = loss + 0.5 * o.prox_mu * prox;
      }
      loss.backward();
      if (adamw) {
        adamw->Step();
      } else {
        sgd->step();
      }
      const double l = loss.item<double>();
      if (!std::isfinite(l)) {
        return AbortedError("training diverged (loss " + std::to_string(l) + " at step " + std::to_string(step) +
                            "); lower the learning rate");
      }
      loss_sum += l;
    }
  } catch (const std::exception& e) {
    return InvalidArgumentError(what + " failed in training: " + FirstLine(e));
  }
  if (adamw) adamw->Save();  // only a task that finished moves the client's moments on
  return total_steps ? loss_sum / static_cast<double>(total_steps) : 0.0;
}

Result<Evaluation> EvaluateLogits(const Forward& forward, const DatasetView& data, const std::string& what,
                                  Objective objective) {
  torch::NoGradGuard no_grad;
  const auto n = static_cast<int64_t>(data.size());
  int64_t correct = 0;
  double loss_sum = 0.0;
  double target_sum = 0.0, target_square_sum = 0.0;  // regression: for SST
  int64_t values = 0;
  try {
    // A language model's windows hold 64 positions each, every one with its attention and logits.
    const int64_t batch = objective == Objective::kNextByte ? 64 : 1000;
    for (int64_t b = 0; b < n; b += batch) {
      const int64_t e = std::min(n, b + batch);
      auto [x, y] = Batch(*data.data, data.indices, b, e, data.label_map);
      if (objective == Objective::kNextByte) std::tie(x, y) = NextByteTargets(x);
      PLEXUS_ASSIGN_OR_RETURN(torch::Tensor logits, forward(x));
      if (objective == Objective::kNextByte) {
        logits = logits.reshape({-1, logits.size(-1)});
        y = y.reshape({-1});
        values += y.numel();
      }
      if (objective == Objective::kMse) {
        loss_sum += F::mse_loss(logits, y, F::MSELossFuncOptions().reduction(torch::kSum)).item<double>();
        target_sum += y.sum().item<double>();
        target_square_sum += y.pow(2).sum().item<double>();
        values += y.numel();
        continue;
      }
      loss_sum += F::cross_entropy(logits, y, F::CrossEntropyFuncOptions().reduction(torch::kSum)).item<double>();
      correct += logits.argmax(1).eq(y).sum().item<int64_t>();
    }
  } catch (const std::exception& e) {
    return InvalidArgumentError(what + " failed in evaluation: " + FirstLine(e));
  }
  Evaluation ev;
  ev.examples = n;
  if (objective == Objective::kMse) {
    const double count = static_cast<double>(values);
    const double sst = target_square_sum - target_sum * target_sum / count;
    ev.loss = loss_sum / count;
    ev.accuracy = sst > 0 ? std::clamp(1.0 - loss_sum / sst, 0.0, 1.0) : 0.0;
    return ev;
  }
  // Next-byte prediction: per predicted byte, not per window.
  const double count = static_cast<double>(objective == Objective::kNextByte ? values : n);
  ev.accuracy = static_cast<double>(correct) / count;
  ev.loss = loss_sum / count;
  return ev;
}

// OpenBLAS starts one thread per CPU it may run on, whatever torch::set_num_threads says, and its
// results depend on that count: the same run would differ between machines, or between a process
// pinned to one core (as mpirun does) and one that is not. Looked up at run time because another
// BLAS may stand in for it.
void SetOpenBlasThreads(int threads) {
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(threads);
}

}  // namespace torch_training

Result<std::unique_ptr<Trainer>> MakeTorchTrainer(const std::string& model_name, int threads) {
  PLEXUS_ASSIGN_OR_RETURN(ModelState layout, InitModel(model_name, 0));
  if (threads < 1) return InvalidArgumentError("threads must be at least 1");
  torch::set_num_threads(threads);
  torch_training::SetOpenBlasThreads(threads);
  return std::unique_ptr<Trainer>(std::make_unique<TorchTrainer>(model_name, std::move(layout)));
}

}  // namespace plexus
