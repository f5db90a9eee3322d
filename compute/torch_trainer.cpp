// The only translation unit that includes LibTorch: it dominates build time, so keep it single.
#include <torch/torch.h>

#include <dlfcn.h>

#include <cmath>
#include <numeric>

#include "compute/model_zoo.h"
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

class TorchTrainer final : public Trainer {
 public:
  TorchTrainer(std::string model_name, ModelState layout)
      : model_name_(std::move(model_name)), layout_(std::move(layout)) {
    forward_ = model_name_ == "cnn" ? &ForwardCnn : &ForwardMlp;
  }

  Result<TrainOutcome> Train(const ModelState& start, const DatasetView& data, const TrainOptions& o) override {
    PLEXUS_RETURN_IF_ERROR(Check(start, data));
    PLEXUS_RETURN_IF_ERROR(CheckTrainOptions(o));
    std::vector<torch::Tensor> params = ToTensors(start, /*requires_grad=*/true);
    std::vector<torch::Tensor> anchor;
    if (o.prox_mu > 0) anchor = ToTensors(start, false);
    torch::optim::SGD opt(params, torch::optim::SGDOptions(o.learning_rate).momentum(o.momentum));

    const auto n = static_cast<int64_t>(data.size());
    const int64_t steps_per_epoch = StepsPerEpoch(o, n);
    const int64_t total_steps = TotalSteps(o, n);
    std::vector<uint32_t> order = data.indices;
    Rng rng(o.seed);
    double loss_sum = 0.0;
    for (int64_t step = 0; step < total_steps; ++step) {
      if (o.before_step) PLEXUS_RETURN_IF_ERROR(o.before_step(step));
      const int64_t in_epoch = step % steps_per_epoch;
      if (in_epoch == 0) rng.Shuffle(std::span<uint32_t>(order));
      const int64_t b = in_epoch * o.batch_size;
      const int64_t e = std::min(n, b + o.batch_size);
      auto [x, y] = Batch(*data.data, order, b, e, data.label_map);
      opt.zero_grad();
      torch::Tensor loss = F::cross_entropy(forward_(params, x), y);
      if (o.prox_mu > 0) {
        torch::Tensor prox = torch::zeros({});
        for (size_t i = 0; i < params.size(); ++i) prox = prox + (params[i] - anchor[i]).pow(2).sum();
        loss = loss + 0.5 * o.prox_mu * prox;
      }
      loss.backward();
      opt.step();
      const double l = loss.item<double>();
      if (!std::isfinite(l)) {
        return Status(StatusCode::kAborted, "training diverged (loss " + std::to_string(l) + " at step " +
                                                std::to_string(step) + "); lower the learning rate");
      }
      loss_sum += l;
    }
    TrainOutcome out;
    out.weights = start;
    CopyBack(params, out.weights);
    out.num_examples = n;
    out.steps = total_steps;
    out.mean_loss = total_steps ? loss_sum / static_cast<double>(total_steps) : 0.0;
    return out;
  }

  Result<Evaluation> Evaluate(const ModelState& model, const DatasetView& data) override {
    PLEXUS_RETURN_IF_ERROR(Check(model, data));
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> params = ToTensors(model, false);
    const auto n = static_cast<int64_t>(data.size());
    int64_t correct = 0;
    double loss_sum = 0.0;
    for (int64_t b = 0; b < n; b += 1000) {
      const int64_t e = std::min(n, b + 1000);
      auto [x, y] = Batch(*data.data, data.indices, b, e, data.label_map);
      torch::Tensor logits = forward_(params, x);
      loss_sum += F::cross_entropy(logits, y, F::CrossEntropyFuncOptions().reduction(torch::kSum)).item<double>();
      correct += logits.argmax(1).eq(y).sum().item<int64_t>();
    }
    Evaluation ev;
    ev.examples = n;
    ev.accuracy = static_cast<double>(correct) / static_cast<double>(n);
    ev.loss = loss_sum / static_cast<double>(n);
    return ev;
  }

 private:
  Status Check(const ModelState& model, const DatasetView& data) const {
    if (!data.data || data.size() == 0) return InvalidArgumentError("no examples to train or evaluate on");
    if (data.data->pixels_per_image() != 784) return InvalidArgumentError("the built-in models take 28x28 images");
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

  static std::pair<torch::Tensor, torch::Tensor> Batch(const Dataset& d, const std::vector<uint32_t>& idx, int64_t b,
                                                       int64_t e, const uint8_t* label_map) {
    const int64_t ppi = d.pixels_per_image();
    torch::Tensor x = torch::empty({e - b, ppi}, torch::kFloat32);
    torch::Tensor y = torch::empty({e - b}, torch::kInt64);
    float* xp = x.data_ptr<float>();
    int64_t* yp = y.data_ptr<int64_t>();
    for (int64_t i = b; i < e; ++i) {
      const uint32_t k = idx[static_cast<size_t>(i)];
      std::memcpy(xp + (i - b) * ppi, d.pixels.data() + static_cast<size_t>(k) * ppi, ppi * sizeof(float));
      yp[i - b] = label_map ? label_map[d.labels[k]] : d.labels[k];
    }
    return {x, y};
  }

  const std::string model_name_;
  const ModelState layout_;
  torch::Tensor (*forward_)(const std::vector<torch::Tensor>&, const torch::Tensor&);
};

}  // namespace

namespace {

// OpenBLAS (LibTorch's BLAS on Debian) starts one thread per CPU it may run on, whatever
// torch::set_num_threads says, and its results depend on that count: the same run would differ
// between machines, or between a process pinned to one core (as mpirun does) and one that is not.
// Looked up at run time because another BLAS may stand in for it.
void SetOpenBlasThreads(int threads) {
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(threads);
}

}  // namespace

Result<std::unique_ptr<Trainer>> MakeTorchTrainer(const std::string& model_name, int threads) {
  PLEXUS_ASSIGN_OR_RETURN(ModelState layout, InitModel(model_name, 0));
  if (threads < 1) return InvalidArgumentError("threads must be at least 1");
  torch::set_num_threads(threads);
  SetOpenBlasThreads(threads);
  return std::unique_ptr<Trainer>(std::make_unique<TorchTrainer>(model_name, std::move(layout)));
}

}  // namespace plexus
