// TaskRunner: where the simulator's local training runs. The simulator starts a job when a task
// is handed out and finishes it when the virtual device would be done; a runner may train at
// either moment, here or elsewhere (MpiTaskRunner spreads jobs over MPI ranks), and must give the
// same outcome bit for bit wherever it trains. LocalTaskRunner trains in this process at Finish,
// so only the models of live versions are held, not one update per busy client.
// Not thread-safe: one simulation loop drives a runner.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "compute/trainer.h"
#include "core/status.h"

namespace plexus {

// One local training run: the base model (shared by every job on that version), the client's
// example indices into the training set, and whether its labels are flipped (an attacker).
struct TrainJob {
  std::shared_ptr<const ModelState> base;
  std::vector<uint32_t> indices;
  bool flip_labels = false;
  TrainOptions options;
};

class TaskRunner {
 public:
  virtual ~TaskRunner() = default;
  // Hands over `job` under a key not in use. Errors are the runner's own (e.g. a lost rank).
  virtual Status Start(uint64_t key, TrainJob job) = 0;
  // The outcome of the job started under `key` (which is then free again); waits for it. The
  // trainer's errors pass through; NotFound for a key not started.
  virtual Result<TrainOutcome> Finish(uint64_t key) = 0;
  // A hint: the jobs under `keys` are finished next, in this order (an edge's partial sum arriving
  // with many updates at once), so a runner that trains elsewhere may ask for them all now and
  // train its own share meanwhile. Finish stays correct in any order whether or not this was said.
  virtual Status WillFinish(std::span<const uint64_t> keys) {
    (void)keys;
    return Status::Ok();
  }
};

// Trains with `trainer` (borrowed) on `train` (borrowed) when a job is finished.
class LocalTaskRunner : public TaskRunner {
 public:
  LocalTaskRunner(Trainer* trainer, const Dataset* train) : trainer_(trainer), train_(train) {}
  Status Start(uint64_t key, TrainJob job) override;
  Result<TrainOutcome> Finish(uint64_t key) override;

 private:
  Trainer* const trainer_;
  const Dataset* const train_;
  std::map<uint64_t, TrainJob> jobs_;
};

// Runs `job` with `trainer` on `train`: what every runner does, wherever the job lands.
Result<TrainOutcome> TrainJobWith(Trainer* trainer, const Dataset& train, const TrainJob& job);

}  // namespace plexus
