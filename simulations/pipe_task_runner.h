// PipeTaskRunner: the simulator's local training done by the process that started it, over two
// pipes, so that a user's own training loop (Python's `plexus.sim(train=...)`, docs/python.md)
// trains the virtual clients while the simulator keeps everything else (engines, devices, links,
// evaluation, results). Like LocalTaskRunner it trains at Finish, one job at a time in the
// simulation's order, so a loop that is deterministic for a given task seed gives the same run
// bit for bit.
//
// The exchange (host byte order: both ends are on one machine). Each message is one line of JSON
// followed by the raw arrays the line announces:
//   simulator -> trainer, once:  {"layout": [{"name": N, "shape": [...]}, ...], "train_examples": E}
//   simulator -> trainer, a job: {"key", "task_id", "round", "local_steps", "local_epochs",
//                                 "batch_size", "learning_rate", "momentum", "seed",
//                                 "indices": I, "floats": F}, then I uint32 example indices into
//                                 the simulator's training set and the F float32 values of the
//                                 task's model in layout order
//   trainer -> simulator:        {"examples": X, "loss": L, "floats": F} and the F trained values;
//                                or {"error": "why"} (the simulation ends with it)
// The simulator closes its end when the run is over. A reply that is malformed, of another size,
// holds a NaN or an infinity, or does not come (the other end closed) is an error naming what was
// wrong; nothing is read past what a line announced.
// Not thread-safe: one simulation loop drives a runner.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "simulations/task_runner.h"

namespace plexus {

class PipeTaskRunner : public TaskRunner {
 public:
  // Jobs go out on `to_trainer`, outcomes come back on `from_trainer`; the runner owns both
  // descriptors and closes them when it is destroyed.
  PipeTaskRunner(int from_trainer, int to_trainer);
  ~PipeTaskRunner() override;
  PipeTaskRunner(const PipeTaskRunner&) = delete;
  PipeTaskRunner& operator=(const PipeTaskRunner&) = delete;

  // The first message: the model's layout and the size of the training set the indices point
  // into. Before any job.
  Status SendLayout(const ModelState& model, int64_t train_examples);

  Status Start(uint64_t key, TrainJob job) override;
  Result<TrainOutcome> Finish(uint64_t key) override;

 private:
  Status WriteAll(const void* data, size_t size);
  Status ReadAll(void* data, size_t size);
  Result<std::string> ReadLine();

  int from_trainer_;
  int to_trainer_;
  std::map<uint64_t, TrainJob> jobs_;
};

}  // namespace plexus
