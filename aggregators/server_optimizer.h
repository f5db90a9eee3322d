// ServerOptimizer: how the averaged client delta moves the global model. Plain (x += lr * d),
// momentum (FedAvgM: v = beta v + d; x += lr * v; Nesterov: x += lr * (d + beta v)) and the adaptive FedOpt family
// (FedAdagrad, FedAdam, FedYogi; Reddi et al., ICLR 2021: m = b1 m + (1 - b1) d, v per variant, x += lr * m / (sqrt(v)
// + tau), v starting at tau^2). Optimizer state lives in memory across rounds; SaveState/RestoreState let the
// coordinator commit it with each round. Thread-compatible.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/model_state.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace plexus {

class ServerOptimizer {
 public:
  virtual ~ServerOptimizer() = default;
  // The new model (version base + 1) for the averaged delta d = scale * sum, elementwise
  // (passing the unscaled sum saves a pass over memory).
  // Runs on `pool` when given. REQUIRES: sum.size() == base.num_params().
  virtual ModelState Step(const ModelState& base, std::span<const double> sum, double scale, ThreadPool* pool) = 0;
  virtual std::string Describe() const = 0;
  // The rate lr when the step is x + lr * d and keeps no state (callers may then fuse the step
  // into their last pass over the inputs); nullopt otherwise.
  virtual std::optional<double> StatelessRate() const { return std::nullopt; }
  // The optimizer's state (momentum, moments) as bytes, empty when it has none yet; RestoreState
  // takes them back (see Aggregator::SaveState). Thread-compatible.
  virtual std::string SaveState() const { return {}; }
  virtual Status RestoreState(std::string_view state);
};

std::unique_ptr<ServerOptimizer> MakePlainStep(double lr);
// With `nesterov`, x += lr (d + beta v) after v = beta v + d (DiLoCo's outer step).
std::unique_ptr<ServerOptimizer> MakeMomentumStep(double lr, double momentum, bool nesterov = false);
enum class AdaptiveKind { kAdagrad, kAdam, kYogi };
std::unique_ptr<ServerOptimizer> MakeAdaptiveStep(AdaptiveKind kind, double lr, double beta1, double beta2, double tau);
// x += lr * sign(d) (DeMo's signum over the averaged fast components).
std::unique_ptr<ServerOptimizer> MakeSignStep(double lr);

}  // namespace plexus
