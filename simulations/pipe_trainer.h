// PipeTrainer: the Trainer seam with the process that started the simulator behind it, over two
// pipes, so that a user's own training loop (Python's `plexus.sim(train=...)`, docs/python.md)
// trains the virtual clients while the simulator keeps everything else (engines, devices, links,
// evaluation, results). The simulator's LocalTaskRunner drives it like any trainer, at Finish, one
// job at a time in the simulation's order, so a loop that is deterministic for a given task seed
// gives the same run bit for bit. It only trains: evaluation stays with the simulator's own trainer.
//
// The exchange (host byte order: both ends are on one machine). Each message is one line of JSON
// followed by the raw arrays the line announces:
//   simulator -> trainer, once:  {"layout": [{"name": N, "shape": [...]}, ...], "train_examples": E}
//   simulator -> trainer, a job: {"key" (its sequence number), "task_id", "round", "local_steps",
//                                 "local_epochs", "batch_size", "learning_rate", "momentum",
//                                 "seed", "config": {...}, "indices": I, "floats": F}, then I
//                                 uint32 example indices into the simulator's training set and
//                                 the F float32 values of the task's model in layout order
//   trainer -> simulator:        {"examples": X, "loss": L, "floats": F} and the F trained values;
//                                or {"error": "why"} (the simulation ends with it)
// The simulator closes its end when the run is over. A reply that is malformed, of another size,
// holds a NaN or an infinity, or does not come (the other end closed) is an error naming what was
// wrong; nothing is read past what a line announced. Examples whose labels read through a map
// (label-flipping attackers) are refused: the loop reads its own labels.
// Not thread-safe: one simulation loop drives it.
#pragma once

#include <cstdint>
#include <string>

#include "compute/trainer.h"

namespace plexus {

class PipeTrainer : public Trainer {
 public:
  // Jobs go out on `to_trainer`, outcomes come back on `from_trainer`; the trainer owns both
  // descriptors and closes them when it is destroyed.
  PipeTrainer(int from_trainer, int to_trainer);
  ~PipeTrainer() override;
  PipeTrainer(const PipeTrainer&) = delete;
  PipeTrainer& operator=(const PipeTrainer&) = delete;

  // The first message: the model's layout and the size of the training set the indices point
  // into. Before any job.
  Status SendLayout(const ModelState& model, int64_t train_examples);

  // One job: `data`'s indices and `options` out, the trained weights back.
  Result<TrainOutcome> Train(const ModelState& start, const DatasetView& data, const TrainOptions& options) override;
  // FailedPrecondition: the simulator evaluates with its own trainer.
  Result<Evaluation> Evaluate(const ModelState& model, const DatasetView& data) override;

 private:
  Status WriteAll(const void* data, size_t size);
  Status ReadAll(void* data, size_t size);
  Result<std::string> ReadLine();

  int from_trainer_;
  int to_trainer_;
  uint64_t jobs_sent_ = 0;  // the key each job carries
};

}  // namespace plexus
