// Trainer: local training and evaluation of a model on local data, the seam between the
// federation code and LibTorch. Implementations keep LibTorch types out of this header.
// Thread-compatible: one Trainer per thread.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "compute/dataset.h"
#include "core/evaluation.h"
#include "core/model_state.h"
#include "core/status.h"
#include "core/task.h"

namespace plexus {

// The inner optimizer's state that a client keeps from task to task (AdamW's two moments of every
// trainable value, in the order the trainer walks them, and its step count): owned by the client
// (its --state-dir keeps it; the simulator keeps one per virtual client), lent to each Train call,
// which reads and advances it. Empty until a trainer first fills it; a state of another size (a
// model of another layout) is started afresh.
struct OptimizerState {
  int64_t steps = 0;
  std::vector<float> first_moment, second_moment;
};

struct TrainOptions {
  int64_t local_epochs = 1;  // used when local_steps == 0
  int64_t local_steps = 0;   // exact number of SGD steps when positive
  int64_t batch_size = 32;
  double learning_rate = 0.01;
  double momentum = 0.9;
  std::string optimizer = "sgd";  // or "adamw" (TaskHyperparams::optimizer)
  double weight_decay = 0.0;      // AdamW's
  // AdamW's moments, carried over from this client's last task (null: start them at zero).
  OptimizerState* optimizer_state = nullptr;
  double prox_mu = 0.0;  // FedProx proximal term (mu/2)||w - w_start||^2; 0 = plain SGD
  uint64_t seed = 0;     // batch order
  // The task being trained (for trainers that tell their user, such as a Python training loop).
  std::string task_id;
  uint64_t round = 0;
  std::map<std::string, std::string> config;  // TaskHyperparams::config, for user-written loops
  // A last batch of a single example joins the batch before it (StepsPerEpoch). The TorchScript
  // trainer sets it: a user's model may hold BatchNorm, which cannot train on one example. The
  // built-in models have none and keep their batches (and every published figure).
  bool join_single_last_batch = false;
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
// positive, there are epochs or steps to run and the optimizer is one the trainers know.
inline Status CheckTrainOptions(const TrainOptions& o) {
  if (o.batch_size <= 0 || o.learning_rate <= 0 || (o.local_steps <= 0 && o.local_epochs <= 0)) {
    return InvalidArgumentError("training needs a positive batch size, learning rate and epochs or steps");
  }
  if (o.optimizer != "sgd" && o.optimizer != "adamw") {
    return InvalidArgumentError("optimizer '" + o.optimizer + "': sgd or adamw");
  }
  return Status::Ok();
}

// SGD steps per epoch over `examples`, and the steps a Train call runs (local_steps when positive,
// else local_epochs full epochs). Every trainer walks the same batches in the same order: batches
// of batch_size, the last one shorter, except that with join_single_last_batch a last batch of a
// single example joins the batch before it. BatchNorm cannot train on one example (PyTorch users
// drop or merge it): a partition one larger than a multiple of --batch-size used to fail there.
inline int64_t StepsPerEpoch(const TrainOptions& o, int64_t examples) {
  const int64_t steps = (examples + o.batch_size - 1) / o.batch_size;
  return o.join_single_last_batch && steps > 1 && examples % o.batch_size == 1 ? steps - 1 : steps;
}
// Step `in_epoch`'s batch: examples [first, second) of the epoch's order.
inline std::pair<int64_t, int64_t> BatchRange(const TrainOptions& o, int64_t examples, int64_t in_epoch) {
  const int64_t begin = in_epoch * o.batch_size;
  const bool last = in_epoch + 1 == StepsPerEpoch(o, examples);
  return {begin, last ? examples : std::min(examples, begin + o.batch_size)};
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
  o.optimizer = hp.optimizer;
  o.weight_decay = hp.weight_decay;
  o.config = hp.config;
  o.seed = seed;
  return o;
}

// The same for `task`, which the options then name (for trainers that tell their user).
inline TrainOptions TrainOptionsFor(const Task& task, uint64_t seed) {
  TrainOptions o = TrainOptionsFor(task.hyperparams, seed);
  o.task_id = task.task_id;
  o.round = task.round;
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
