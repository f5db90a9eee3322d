// Trainer: local training and evaluation of a model on local data, the seam between the
// federation code and LibTorch. Implementations keep LibTorch types out of this header.
// Thread-compatible: one Trainer per thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "compute/dataset.h"
#include "core/evaluation.h"
#include "core/model_state.h"
#include "core/status.h"
#include "core/task.h"

namespace plexus {

struct TrainOptions {
  int64_t local_epochs = 1;  // used when local_steps == 0
  int64_t local_steps = 0;   // exact number of SGD steps when positive
  int64_t batch_size = 32;
  double learning_rate = 0.01;
  double momentum = 0.9;
  double prox_mu = 0.0;  // FedProx proximal term (mu/2)||w - w_start||^2; 0 = plain SGD
  uint64_t seed = 0;     // batch order
  // Called before every step (when set): a non-OK status ends training with it. The client's
  // device policy waits in here, so a task pauses at a step boundary and resumes.
  std::function<Status(int64_t step)> before_step;
};

struct TrainOutcome {
  ModelState weights;        // trained weights, same layout and version as the start model
  int64_t num_examples = 0;  // size of the local data set (FedAvg's weight)
  int64_t steps = 0;
  double mean_loss = 0.0;  // mean training loss over the steps
};

// What every trainer checks first: InvalidArgument unless the batch size and learning rate are
// positive and there are epochs or steps to run.
inline Status CheckTrainOptions(const TrainOptions& o) {
  if (o.batch_size <= 0 || o.learning_rate <= 0 || (o.local_steps <= 0 && o.local_epochs <= 0)) {
    return InvalidArgumentError("training needs a positive batch size, learning rate and epochs or steps");
  }
  return Status::Ok();
}

// SGD steps per epoch over `examples`, and the steps a Train call runs (local_steps when positive,
// else local_epochs full epochs). Every trainer walks the same batches in the same order.
inline int64_t StepsPerEpoch(const TrainOptions& o, int64_t examples) {
  return (examples + o.batch_size - 1) / o.batch_size;
}
inline int64_t TotalSteps(const TrainOptions& o, int64_t examples) {
  return o.local_steps > 0 ? o.local_steps : o.local_epochs * StepsPerEpoch(o, examples);
}

// The options a task asks for; `seed` sets the batch order.
inline TrainOptions TrainOptionsFor(const TaskHyperparams& hp, uint64_t seed) {
  TrainOptions o;
  o.local_epochs = hp.local_epochs;
  o.local_steps = hp.local_steps;
  o.batch_size = hp.batch_size;
  o.learning_rate = hp.learning_rate;
  o.momentum = hp.momentum;
  o.seed = seed;
  return o;
}

class Trainer {
 public:
  virtual ~Trainer() = default;
  // InvalidArgument: empty data or a model of the wrong layout. Aborted when training diverged (a
  // non-finite loss): this task's result is worthless, the trainer is still usable.
  virtual Result<TrainOutcome> Train(const ModelState& start, const DatasetView& data, const TrainOptions& options) = 0;
  virtual Result<Evaluation> Evaluate(const ModelState& model, const DatasetView& data) = 0;
};

#if PLEXUS_WITH_TORCH
// A LibTorch CPU trainer for one of the models in model_zoo.h, using `threads` intra-op threads.
// Only in builds with LibTorch (PLEXUS_WITH_TORCH; an edge build may leave it out).
Result<std::unique_ptr<Trainer>> MakeTorchTrainer(const std::string& model_name, int threads);
#endif

}  // namespace plexus
