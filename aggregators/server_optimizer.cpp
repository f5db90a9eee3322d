#include "aggregators/server_optimizer.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>

#include "aggregators/streaming_mean.h"
#include "aggregators/update_buffer.h"

namespace plexus {
namespace {

// A model with base's layout and the next version; every value is overwritten by the caller.
ModelState NextVersion(const ModelState& base) {
  ModelState out = ModelState::UninitializedLike(base);
  out.set_version(base.version() + 1);
  return out;
}

// State bytes: a tag line, the vector length, then the vectors' doubles (host byte order: the
// state only travels between runs of the same server).
std::string PackState(const std::string& tag, std::initializer_list<const std::vector<double>*> vectors) {
  if ((*vectors.begin())->empty()) return {};
  const uint64_t n = (*vectors.begin())->size();
  std::string out;
  out.reserve(tag.size() + 1 + sizeof n + vectors.size() * n * sizeof(double));  // one allocation, no regrowth
  out.append(tag).append("\n");
  out.append(reinterpret_cast<const char*>(&n), sizeof n);
  for (const std::vector<double>* v : vectors) out.append(reinterpret_cast<const char*>(v->data()), n * sizeof(double));
  return out;
}

Status UnpackState(std::string_view bytes, const std::string& tag,
                   std::initializer_list<std::vector<double>*> vectors) {
  const std::string head = tag + "\n";
  uint64_t n = 0;
  if (bytes.substr(0, head.size()) != head || bytes.size() < head.size() + sizeof n) {
    return InvalidArgumentError("the stored server optimizer state is not " + tag + " state");
  }
  std::memcpy(&n, bytes.data() + head.size(), sizeof n);
  const size_t expected = head.size() + sizeof n + vectors.size() * n * sizeof(double);
  if (bytes.size() != expected) return InvalidArgumentError("the stored " + tag + " state is truncated or too long");
  const char* p = bytes.data() + head.size() + sizeof n;
  for (std::vector<double>* v : vectors) {
    v->resize(n);
    std::memcpy(v->data(), p, n * sizeof(double));
    p += n * sizeof(double);
  }
  return Status::Ok();
}

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

class PlainStep final : public ServerOptimizer {
 public:
  explicit PlainStep(double lr) : lr_(lr) {}
  ModelState Step(const ModelState& base, std::span<const double> sum, double scale, ThreadPool* pool) override {
    return ApplyDelta(base, sum, lr_ * scale, pool);
  }
  std::string Describe() const override { return "lr=" + Num(lr_); }
  std::optional<double> StatelessRate() const override { return lr_; }

 private:
  const double lr_;
};

class MomentumStep final : public ServerOptimizer {
 public:
  MomentumStep(double lr, double momentum, bool nesterov) : lr_(lr), beta_(momentum), nesterov_(nesterov) {}
  ModelState Step(const ModelState& base, std::span<const double> sum, double scale, ThreadPool* pool) override {
    if (v_.size() != sum.size()) v_.assign(sum.size(), 0.0);
    ModelState out = NextVersion(base);
    float* x = out.data().data();
    const float* b = base.data().data();
    double* v = v_.data();
    const double* s = sum.data();
    ForRanges(pool, sum.size(), [=, this](size_t begin, size_t end) {
      for (size_t j = begin; j < end; ++j) {
        const double d = scale * s[j];
        v[j] = beta_ * v[j] + d;
        // Nesterov looks ahead along the new velocity: x += lr (d + beta v), as PyTorch's SGD
        // with nesterov=True does for the gradient -d.
        x[j] = static_cast<float>(static_cast<double>(b[j]) + lr_ * (nesterov_ ? d + beta_ * v[j] : v[j]));
      }
    });
    return out;
  }
  std::string Describe() const override {
    return "lr=" + Num(lr_) + ",momentum=" + Num(beta_) + (nesterov_ ? ",nesterov=true" : "");
  }
  std::string SaveState() const override { return PackState("plexus.momentum.v1", {&v_}); }
  Status RestoreState(std::string_view state) override {
    if (state.empty()) return Status::Ok();
    std::vector<double> v;
    PLEXUS_RETURN_IF_ERROR(UnpackState(state, "plexus.momentum.v1", {&v}));
    v_ = std::move(v);
    return Status::Ok();
  }

 private:
  const double lr_, beta_;
  const bool nesterov_;
  std::vector<double> v_;
};

class AdaptiveStep final : public ServerOptimizer {
 public:
  AdaptiveStep(AdaptiveKind kind, double lr, double b1, double b2, double tau)
      : kind_(kind), lr_(lr), b1_(b1), b2_(b2), tau_(tau) {}
  ModelState Step(const ModelState& base, std::span<const double> sum, double scale, ThreadPool* pool) override {
    if (m_.size() != sum.size()) {
      m_.assign(sum.size(), 0.0);
      v_.assign(sum.size(), tau_ * tau_);
    }
    if (kind_ == AdaptiveKind::kAdagrad) return StepAs<AdaptiveKind::kAdagrad>(base, sum, scale, pool);
    if (kind_ == AdaptiveKind::kAdam) return StepAs<AdaptiveKind::kAdam>(base, sum, scale, pool);
    return StepAs<AdaptiveKind::kYogi>(base, sum, scale, pool);
  }
  std::string Describe() const override {
    return "lr=" + Num(lr_) + ",beta1=" + Num(b1_) + (kind_ == AdaptiveKind::kAdagrad ? "" : ",beta2=" + Num(b2_)) +
           ",tau=" + Num(tau_);
  }
  std::string SaveState() const override { return PackState(Tag(), {&m_, &v_}); }
  Status RestoreState(std::string_view state) override {
    if (state.empty()) return Status::Ok();
    std::vector<double> m, v;
    PLEXUS_RETURN_IF_ERROR(UnpackState(state, Tag(), {&m, &v}));
    m_ = std::move(m);
    v_ = std::move(v);
    return Status::Ok();
  }

 private:
  // One loop per kind, with the rates in locals, so that the compiler vectorizes it: a switch per
  // value, or rates re-read after every store to m and v (which might alias them), kept it scalar.
  // The operations and their order are those of the definitions above, and this file compiles
  // without fused multiply-adds and with sqrt as one instruction (no errno), so the vector loop
  // rounds every value as the scalar one did.
  template <AdaptiveKind kKind>
  ModelState StepAs(const ModelState& base, std::span<const double> sum, double scale, ThreadPool* pool) {
    ModelState out = NextVersion(base);
    float* x = out.data().data();
    const float* b = base.data().data();
    double* m = m_.data();
    double* v = v_.data();
    const double* s = sum.data();
    const double lr = lr_, b1 = b1_, b2 = b2_, tau = tau_;
    ForRanges(pool, sum.size(), [=](size_t begin, size_t end) {
      for (size_t j = begin; j < end; ++j) {
        const double g = scale * s[j], g2 = g * g;
        const double mj = b1 * m[j] + (1.0 - b1) * g;
        double vj = v[j];
        if constexpr (kKind == AdaptiveKind::kAdagrad) {
          vj += g2;
        } else if constexpr (kKind == AdaptiveKind::kAdam) {
          vj = b2 * vj + (1.0 - b2) * g2;
        } else {
          vj -= (1.0 - b2) * g2 * ((vj > g2 ? 1.0 : 0.0) - (vj < g2 ? 1.0 : 0.0));  // sign(v - g2)
        }
        m[j] = mj;
        v[j] = vj;
        x[j] = static_cast<float>(static_cast<double>(b[j]) + lr * mj / (std::sqrt(vj) + tau));
      }
    });
    return out;
  }

  std::string Tag() const {
    return kind_ == AdaptiveKind::kAdagrad ? "plexus.fedadagrad.v1"
           : kind_ == AdaptiveKind::kAdam  ? "plexus.fedadam.v1"
                                           : "plexus.fedyogi.v1";
  }

  const AdaptiveKind kind_;
  const double lr_, b1_, b2_, tau_;
  std::vector<double> m_, v_;
};

}  // namespace

Status ServerOptimizer::RestoreState(std::string_view state) {
  if (state.empty()) return Status::Ok();
  return InvalidArgumentError("the server step " + Describe() + " keeps no state, but state was stored");
}

std::unique_ptr<ServerOptimizer> MakePlainStep(double lr) { return std::make_unique<PlainStep>(lr); }
namespace {

// DeMo's step (Peng et al. 2024): x += lr * sign(d), sign(0) = 0. The mean d is the clients' fast
// momentum components (the dct codec); the sign makes the step's size lr whatever their scale.
class SignStep final : public ServerOptimizer {
 public:
  explicit SignStep(double lr) : lr_(lr) {}
  ModelState Step(const ModelState& base, std::span<const double> sum, double, ThreadPool* pool) override {
    // The scale is positive (a mean), so it does not change a sign: the sum's is the mean's.
    ModelState out = NextVersion(base);
    float* x = out.data().data();
    const float* b = base.data().data();
    const double* s = sum.data();
    const double lr = lr_;
    ForRanges(pool, sum.size(), [=](size_t begin, size_t end) {
      for (size_t j = begin; j < end; ++j) {
        // As a difference of two selects (0 for NaN too), which vectorizes where a branch did not.
        const double sign = (s[j] > 0 ? 1.0 : 0.0) - (s[j] < 0 ? 1.0 : 0.0);
        x[j] = static_cast<float>(static_cast<double>(b[j]) + lr * sign);
      }
    });
    return out;
  }
  std::string Describe() const override { return "lr=" + Num(lr_); }

 private:
  const double lr_;
};

}  // namespace

std::unique_ptr<ServerOptimizer> MakeSignStep(double lr) { return std::make_unique<SignStep>(lr); }

std::unique_ptr<ServerOptimizer> MakeMomentumStep(double lr, double momentum, bool nesterov) {
  return std::make_unique<MomentumStep>(lr, momentum, nesterov);
}
std::unique_ptr<ServerOptimizer> MakeAdaptiveStep(AdaptiveKind kind, double lr, double beta1, double beta2,
                                                  double tau) {
  return std::make_unique<AdaptiveStep>(kind, lr, beta1, beta2, tau);
}

}  // namespace plexus
