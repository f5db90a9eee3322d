// The in-process simulator: runs the real SyncEngine with N virtual clients, a ManualClock and
// a MemoryStore, with no sockets and no threads, so the same seed gives the same result bit for
// bit. Each round every virtual client polls; the sampled ones train on their partition through
// the Trainer (in client-id order) and submit their deltas. Borrows trainer, evaluator and data.
// Single-threaded.
#pragma once

#include <functional>
#include <string>

#include "compute/dataset.h"
#include "compute/partition.h"
#include "compute/trainer.h"
#include "core/status.h"
#include "server/coordinator/sync_engine.h"

namespace plexus {

struct SimOptions {
  int64_t clients = 10;           // virtual clients (N)
  std::string model = "mlp";
  PartitionSpec partition;        // how the training set is split among the N clients
  uint64_t seed = 0;              // model init, partition, sampling and batch order
  SyncOptions sync;               // rounds, clients per round, strategy, hyperparameters
};

struct SimRound {
  RoundRecord record;
  double wall_time_s = 0.0;       // since the simulation started
};

struct SimResult {
  std::vector<SimRound> rounds;
  double final_test_accuracy = 0.0;
  double final_test_loss = 0.0;
  uint64_t model_version = 0;
  std::string final_model_sha256;
  ModelState final_model;
  double wall_time_s = 0.0;
  std::string strategy;
};

// InvalidArgument for inconsistent options (e.g. more clients per round than clients).
// `on_round` (optional) is called after each round, for progress output.
Result<SimResult> RunSimulation(const SimOptions& options, const Dataset& train, Trainer* trainer,
                                ModelEvaluator* evaluator, const std::function<void(const SimRound&)>& on_round);

}  // namespace plexus
