// Compiled with -ffp-contract=off (compute/CMakeLists.txt): no fused multiply-adds, so the bits
// do not depend on the architecture. Every loop that sums runs in one fixed order.
#include "compute/portable_trainer.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "compute/model_zoo.h"
#include "core/rng.h"

namespace plexus {
namespace {

using Span = std::span<float>;
using ConstSpan = std::span<const float>;

// out[b][o] = bias[o] + sum_i in[b][i] * w[o][i]
void LinearForward(ConstSpan in, size_t batch, size_t n_in, ConstSpan w, ConstSpan bias, size_t n_out,
                   std::vector<float>* out) {
  out->assign(batch * n_out, 0.0f);
  for (size_t b = 0; b < batch; ++b) {
    const float* x = in.data() + b * n_in;
    for (size_t o = 0; o < n_out; ++o) {
      const float* row = w.data() + o * n_in;
      float s = 0.0f;
      for (size_t i = 0; i < n_in; ++i) s += x[i] * row[i];
      (*out)[b * n_out + o] = s + bias[o];
    }
  }
}

// Gradients of a linear layer: dw += dout^T in, dbias += column sums of dout, din = dout w
// (when din is not null).
void LinearBackward(ConstSpan in, ConstSpan dout, size_t batch, size_t n_in, size_t n_out, ConstSpan w, Span dw,
                    Span dbias, std::vector<float>* din) {
  for (size_t b = 0; b < batch; ++b) {
    const float* x = in.data() + b * n_in;
    for (size_t o = 0; o < n_out; ++o) {
      const float g = dout[b * n_out + o];
      dbias[o] += g;
      float* row = dw.data() + o * n_in;
      for (size_t i = 0; i < n_in; ++i) row[i] += g * x[i];
    }
  }
  if (!din) return;
  din->assign(batch * n_in, 0.0f);
  for (size_t b = 0; b < batch; ++b) {
    float* d = din->data() + b * n_in;
    for (size_t o = 0; o < n_out; ++o) {
      const float g = dout[b * n_out + o];
      const float* row = w.data() + o * n_in;
      for (size_t i = 0; i < n_in; ++i) d[i] += g * row[i];
    }
  }
}

void Relu(std::vector<float>* v) {
  for (float& x : *v) x = x > 0.0f ? x : 0.0f;
}
// Zeroes the gradient where the (post-ReLU) activation is not positive.
void ReluBackward(const std::vector<float>& activation, std::vector<float>* grad) {
  for (size_t i = 0; i < grad->size(); ++i) {
    if (!(activation[i] > 0.0f)) (*grad)[i] = 0.0f;
  }
}

// 3x3 convolution, stride 1, zero padding 1: [batch][cin][h][w] -> [batch][cout][h][w].
void ConvForward(ConstSpan in, size_t batch, size_t cin, size_t h, size_t w, ConstSpan k, ConstSpan bias, size_t cout,
                 std::vector<float>* out) {
  out->assign(batch * cout * h * w, 0.0f);
  for (size_t b = 0; b < batch; ++b) {
    for (size_t o = 0; o < cout; ++o) {
      float* dst = out->data() + (b * cout + o) * h * w;
      for (size_t y = 0; y < h; ++y) {
        for (size_t x = 0; x < w; ++x) {
          float s = 0.0f;
          for (size_t i = 0; i < cin; ++i) {
            const float* src = in.data() + (b * cin + i) * h * w;
            const float* kk = k.data() + ((o * cin + i) * 9);
            for (size_t ky = 0; ky < 3; ++ky) {
              const size_t yy = y + ky;
              if (yy < 1 || yy > h) continue;
              for (size_t kx = 0; kx < 3; ++kx) {
                const size_t xx = x + kx;
                if (xx < 1 || xx > w) continue;
                s += src[(yy - 1) * w + (xx - 1)] * kk[ky * 3 + kx];
              }
            }
          }
          dst[y * w + x] = s + bias[o];
        }
      }
    }
  }
}

void ConvBackward(ConstSpan in, ConstSpan dout, size_t batch, size_t cin, size_t h, size_t w, ConstSpan k, size_t cout,
                  Span dk, Span dbias, std::vector<float>* din) {
  if (din) din->assign(batch * cin * h * w, 0.0f);
  for (size_t b = 0; b < batch; ++b) {
    for (size_t o = 0; o < cout; ++o) {
      const float* g = dout.data() + (b * cout + o) * h * w;
      for (size_t p = 0; p < h * w; ++p) dbias[o] += g[p];
      for (size_t i = 0; i < cin; ++i) {
        const float* src = in.data() + (b * cin + i) * h * w;
        const float* kk = k.data() + ((o * cin + i) * 9);
        float* dkk = dk.data() + ((o * cin + i) * 9);
        float* dsrc = din ? din->data() + (b * cin + i) * h * w : nullptr;
        for (size_t y = 0; y < h; ++y) {
          for (size_t x = 0; x < w; ++x) {
            const float gv = g[y * w + x];
            for (size_t ky = 0; ky < 3; ++ky) {
              const size_t yy = y + ky;
              if (yy < 1 || yy > h) continue;
              for (size_t kx = 0; kx < 3; ++kx) {
                const size_t xx = x + kx;
                if (xx < 1 || xx > w) continue;
                const size_t at = (yy - 1) * w + (xx - 1);
                dkk[ky * 3 + kx] += gv * src[at];
                if (dsrc) dsrc[at] += gv * kk[ky * 3 + kx];
              }
            }
          }
        }
      }
    }
  }
}

// 2x2 max pooling, stride 2: [n][h][w] planes -> [n][h/2][w/2], remembering each maximum's place
// (the first in scan order on ties).
void PoolForward(const std::vector<float>& in, size_t planes, size_t h, size_t w, std::vector<float>* out,
                 std::vector<uint32_t>* where) {
  const size_t oh = h / 2, ow = w / 2;
  out->assign(planes * oh * ow, 0.0f);
  where->assign(planes * oh * ow, 0);
  for (size_t p = 0; p < planes; ++p) {
    for (size_t y = 0; y < oh; ++y) {
      for (size_t x = 0; x < ow; ++x) {
        size_t best = p * h * w + (2 * y) * w + 2 * x;
        for (size_t dy = 0; dy < 2; ++dy) {
          for (size_t dx = 0; dx < 2; ++dx) {
            const size_t at = p * h * w + (2 * y + dy) * w + (2 * x + dx);
            if (in[at] > in[best]) best = at;
          }
        }
        (*out)[(p * oh + y) * ow + x] = in[best];
        (*where)[(p * oh + y) * ow + x] = static_cast<uint32_t>(best);
      }
    }
  }
}

void PoolBackward(const std::vector<float>& dout, const std::vector<uint32_t>& where, size_t in_size,
                  std::vector<float>* din) {
  din->assign(in_size, 0.0f);
  for (size_t i = 0; i < dout.size(); ++i) (*din)[where[i]] += dout[i];
}

// Softmax cross-entropy over the batch: the mean loss, and dlogits = (softmax - onehot) / batch.
double CrossEntropy(const std::vector<float>& logits, const std::vector<uint8_t>& labels, size_t classes,
                    std::vector<float>* dlogits, size_t* correct) {
  const size_t batch = labels.size();
  if (dlogits) dlogits->assign(logits.size(), 0.0f);
  double loss = 0.0;
  for (size_t b = 0; b < batch; ++b) {
    const float* z = logits.data() + b * classes;
    const size_t arg = static_cast<size_t>(std::max_element(z, z + classes) - z);
    if (correct && arg == labels[b]) ++*correct;
    const float m = z[arg];
    double sum = 0.0;
    for (size_t c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(z[c] - m));
    const double lse = static_cast<double>(m) + std::log(sum);
    loss += lse - static_cast<double>(z[labels[b]]);
    if (!dlogits) continue;
    for (size_t c = 0; c < classes; ++c) {
      const double p = std::exp(static_cast<double>(z[c]) - lse);
      (*dlogits)[b * classes + c] = static_cast<float>((p - (c == labels[b] ? 1.0 : 0.0)) / static_cast<double>(batch));
    }
  }
  return loss / static_cast<double>(batch);
}

class PortableTrainer final : public Trainer {
 public:
  PortableTrainer(std::string name, ModelState layout) : name_(std::move(name)), layout_(std::move(layout)) {}

  Result<TrainOutcome> Train(const ModelState& start, const DatasetView& data, const TrainOptions& o) override {
    PLEXUS_RETURN_IF_ERROR(Check(start, data));
    PLEXUS_RETURN_IF_ERROR(CheckTrainOptions(o));
    if (o.optimizer != "sgd") {
      return InvalidArgumentError("the portable trainer runs SGD with momentum only; --optimizer " + o.optimizer +
                                  " needs LibTorch");
    }
    ModelState w = start;
    ModelState grad = start, velocity = start;
    std::fill(velocity.data().begin(), velocity.data().end(), 0.0f);
    const auto n = static_cast<int64_t>(data.size());
    const int64_t steps_per_epoch = StepsPerEpoch(o, n);
    const int64_t total_steps = TotalSteps(o, n);
    std::vector<uint32_t> order = data.indices;
    Rng rng(o.seed);  // the LibTorch trainer's batch order
    double loss_sum = 0.0;
    const auto lr = static_cast<float>(o.learning_rate), momentum = static_cast<float>(o.momentum),
               mu = static_cast<float>(o.prox_mu);
    for (int64_t step = 0; step < total_steps; ++step) {
      if (o.before_step) PLEXUS_RETURN_IF_ERROR(o.before_step(step));
      const int64_t in_epoch = step % steps_per_epoch;
      if (in_epoch == 0) rng.Shuffle(std::span<uint32_t>(order));
      const auto [b, e] = BatchRange(o, n, in_epoch);
      LoadBatch(data, order, static_cast<size_t>(b), static_cast<size_t>(e));
      std::fill(grad.data().begin(), grad.data().end(), 0.0f);
      double loss = Pass(w, &grad);
      if (mu > 0) {
        double prox = 0.0;
        for (size_t i = 0; i < w.data().size(); ++i) {
          const float d = w.data()[i] - start.data()[i];
          prox += static_cast<double>(d) * d;
          grad.data()[i] += mu * d;
        }
        loss += 0.5 * o.prox_mu * prox;
      }
      if (!std::isfinite(loss)) {
        return AbortedError("training diverged (loss " + std::to_string(loss) + " at step " + std::to_string(step) +
                            "); lower the learning rate");
      }
      loss_sum += loss;
      std::span<float> v = velocity.data(), g = grad.data(), p = w.data();
      for (size_t i = 0; i < p.size(); ++i) {
        v[i] = step == 0 ? g[i] : momentum * v[i] + g[i];
        p[i] -= lr * v[i];
      }
    }
    TrainOutcome out;
    out.weights = std::move(w);
    out.num_examples = n;
    out.steps = total_steps;
    out.mean_loss = total_steps ? loss_sum / static_cast<double>(total_steps) : 0.0;
    return out;
  }

  Result<Evaluation> Evaluate(const ModelState& model, const DatasetView& data) override {
    PLEXUS_RETURN_IF_ERROR(Check(model, data));
    size_t correct = 0;
    double loss_sum = 0.0;
    for (size_t b = 0; b < data.size(); b += 256) {
      const size_t e = std::min(data.size(), b + 256);
      LoadBatch(data, data.indices, b, e);
      loss_sum += Pass(model, nullptr, &correct) * static_cast<double>(e - b);
    }
    Evaluation ev;
    ev.examples = static_cast<int64_t>(data.size());
    ev.accuracy = static_cast<double>(correct) / static_cast<double>(data.size());
    ev.loss = loss_sum / static_cast<double>(data.size());
    return ev;
  }

 private:
  Status Check(const ModelState& model, const DatasetView& data) const {
    if (!data.data || data.size() == 0) return InvalidArgumentError("no examples to train or evaluate on");
    if (data.data->features_per_example() != 784) return InvalidArgumentError("the built-in models take 28x28 images");
    return model.CheckSameLayout(layout_).WithContext("model '" + name_ + "'");
  }

  void LoadBatch(const DatasetView& data, const std::vector<uint32_t>& order, size_t b, size_t e) {
    const Dataset& d = *data.data;
    const auto ppi = static_cast<size_t>(d.features_per_example());
    x_.resize((e - b) * ppi);
    y_.resize(e - b);
    for (size_t i = b; i < e; ++i) {
      const uint32_t k = order[i];
      d.CopyExample(k, x_.data() + (i - b) * ppi);
      y_[i - b] = data.label_map ? data.label_map[d.labels[k]] : d.labels[k];
    }
  }

  // Forward over the loaded batch; with `grad`, backward into it. Returns the mean loss.
  double Pass(const ModelState& w, ModelState* grad, size_t* correct = nullptr) {
    return name_ == "cnn" ? PassCnn(w, grad, correct) : PassMlp(w, grad, correct);
  }

  double PassMlp(const ModelState& w, ModelState* grad, size_t* correct) {
    const size_t batch = y_.size();
    LinearForward(x_, batch, 784, w.tensor(0), w.tensor(1), 200, &h1_);
    Relu(&h1_);
    LinearForward(h1_, batch, 200, w.tensor(2), w.tensor(3), 10, &logits_);
    const double loss = CrossEntropy(logits_, y_, 10, grad ? &dlogits_ : nullptr, correct);
    if (!grad) return loss;
    LinearBackward(h1_, dlogits_, batch, 200, 10, w.tensor(2), grad->tensor(2), grad->tensor(3), &dh1_);
    ReluBackward(h1_, &dh1_);
    LinearBackward(x_, dh1_, batch, 784, 200, w.tensor(0), grad->tensor(0), grad->tensor(1), nullptr);
    return loss;
  }

  double PassCnn(const ModelState& w, ModelState* grad, size_t* correct) {
    const size_t batch = y_.size();
    ConvForward(x_, batch, 1, 28, 28, w.tensor(0), w.tensor(1), 32, &c1_);
    Relu(&c1_);
    PoolForward(c1_, batch * 32, 28, 28, &p1_, &w1_);
    ConvForward(p1_, batch, 32, 14, 14, w.tensor(2), w.tensor(3), 64, &c2_);
    Relu(&c2_);
    PoolForward(c2_, batch * 64, 14, 14, &p2_, &w2_);
    LinearForward(p2_, batch, 3136, w.tensor(4), w.tensor(5), 128, &h1_);
    Relu(&h1_);
    LinearForward(h1_, batch, 128, w.tensor(6), w.tensor(7), 10, &logits_);
    const double loss = CrossEntropy(logits_, y_, 10, grad ? &dlogits_ : nullptr, correct);
    if (!grad) return loss;
    LinearBackward(h1_, dlogits_, batch, 128, 10, w.tensor(6), grad->tensor(6), grad->tensor(7), &dh1_);
    ReluBackward(h1_, &dh1_);
    LinearBackward(p2_, dh1_, batch, 3136, 128, w.tensor(4), grad->tensor(4), grad->tensor(5), &dp2_);
    PoolBackward(dp2_, w2_, c2_.size(), &dc2_);
    ReluBackward(c2_, &dc2_);
    ConvBackward(p1_, dc2_, batch, 32, 14, 14, w.tensor(2), 64, grad->tensor(2), grad->tensor(3), &dp1_);
    PoolBackward(dp1_, w1_, c1_.size(), &dc1_);
    ReluBackward(c1_, &dc1_);
    ConvBackward(x_, dc1_, batch, 1, 28, 28, w.tensor(0), 32, grad->tensor(0), grad->tensor(1), nullptr);
    return loss;
  }

  const std::string name_;
  const ModelState layout_;
  // Scratch, reused across steps.
  std::vector<float> x_, h1_, logits_, dlogits_, dh1_, c1_, p1_, c2_, p2_, dp2_, dc2_, dp1_, dc1_;
  std::vector<uint8_t> y_;
  std::vector<uint32_t> w1_, w2_;
};

}  // namespace

Result<std::unique_ptr<Trainer>> MakePortableTrainer(const std::string& model_name) {
  if (IsLanguageModel(model_name)) {
    return InvalidArgumentError("the portable trainer has the image models (mlp, cnn); " + model_name +
                                " needs LibTorch");
  }
  PLEXUS_ASSIGN_OR_RETURN(ModelState layout, InitModel(model_name, 0));
  return std::unique_ptr<Trainer>(std::make_unique<PortableTrainer>(model_name, std::move(layout)));
}

}  // namespace plexus
