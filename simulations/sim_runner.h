// The in-process simulator: runs the real coordinator engine (sync, async or semiasync) with N
// virtual clients in virtual time, with a ManualClock and a MemoryStore, no sockets and no
// threads, so the same seed gives the same result bit for bit. A discrete-event loop: a client
// polls; when it gets a task it trains at once through the Trainer (on the model the task names)
// and its update is submitted when its virtual device would have finished, local steps x its
// time per step plus a fixed overhead for the transfers; then it polls again. Engine deadlines
// fire from ticks every 100 virtual ms. Borrows trainer, evaluator and data. Single-threaded.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "compute/dataset.h"
#include "compute/partition.h"
#include "compute/trainer.h"
#include "core/status.h"
#include "server/coordinator/async_engine.h"
#include "server/coordinator/sync_engine.h"

namespace plexus {

// Heterogeneous devices: client times per local step spread geometrically from ms_per_step (the
// fastest) to ms_per_step x speed_ratio (the slowest), assigned to clients in a seeded order; a
// task is abandoned with probability `dropout` (the client goes silent for as long as the task
// would have taken, then polls again).
struct DeviceSpeeds {
  double ms_per_step = 10.0;
  double speed_ratio = 1.0;        // slowest / fastest
  int64_t task_overhead_ms = 50;   // per task: model download and update upload
  double dropout = 0.0;            // probability that a task is abandoned, in [0, 1)

  // Named profiles: uniform (10 ms per step for everyone, 50 ms overhead, no dropouts),
  // heterogeneous (10-100 ms per step, 100 ms overhead, 5% dropouts), mobile (30-600 ms per
  // step, 500 ms overhead, 20% dropouts). InvalidArgument for another name.
  static Result<DeviceSpeeds> Profile(const std::string& name);
  // InvalidArgument naming the bad field.
  Status Validate() const;
  // Time per local step of each of n clients.
  std::vector<double> Assign(size_t n, uint64_t seed) const;
};

struct SimOptions {
  int64_t clients = 10;           // virtual clients (N)
  std::string model = "mlp";
  PartitionSpec partition;        // how the training set is split among the N clients
  uint64_t seed = 0;              // model init, partition, sampling, speeds and batch order
  std::string mode = "sync";      // sync | async | semiasync
  SyncOptions sync;               // sync mode; its rounds and task also apply to the other modes
  AsyncOptions async;             // async and semiasync modes (rounds and task as in `sync`)
  DeviceSpeeds speeds;
  int64_t max_tasks = 0;          // stop once this many tasks were trained (0 = no budget); the
                                  // run then ends with the versions published by then
  std::string attack = "none";    // what malicious clients send, see attack.h
  double attackers = 0.0;         // fraction of the clients that are malicious, chosen by the seed
};

struct SimRound {
  RoundRecord record;
  double wall_time_s = 0.0;       // real time since the simulation started
  double virtual_time_s = 0.0;    // simulated time when the version was published
};

struct SimResult {
  std::vector<SimRound> rounds;
  double final_test_accuracy = 0.0;
  double final_test_loss = 0.0;
  uint64_t model_version = 0;
  std::string final_model_sha256;
  ModelState final_model;
  double wall_time_s = 0.0;
  double virtual_time_s = 0.0;
  int64_t tasks_trained = 0;
  int64_t tasks_dropped = 0;      // abandoned by their (virtual) device
  int64_t updates_refused = 0;    // e.g. too stale, or past a sync round's close
  int64_t attackers = 0;          // malicious clients
  std::string strategy;
};

// InvalidArgument for inconsistent options (e.g. more clients per round than clients).
// `on_round` (optional) is called after each published version, for progress output.
Result<SimResult> RunSimulation(const SimOptions& options, const Dataset& train, Trainer* trainer,
                                ModelEvaluator* evaluator, const std::function<void(const SimRound&)>& on_round);

}  // namespace plexus
