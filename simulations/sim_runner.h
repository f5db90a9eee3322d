// The in-process simulator: runs the real coordinator engine (sync, async or semiasync) with N
// virtual clients in virtual time, with a ManualClock and a MemoryStore, no sockets and no
// threads, so the same seed gives the same result bit for bit. It runs on the general event core
// (simulations/event_network.h): the server and every client are nodes with links, and a task is
// a model download (a message), the local steps (a timer) and the update upload (a message); a
// client polls; when it gets a task its training job goes to the TaskRunner (on the model the
// task names) and its update is submitted when the upload has arrived; then it polls again. A
// client told to wait is parked at no cost and polls again when the engine's poll epoch moves
// (or every half client timeout, to stay connected), so idle clients cost a few hundred bytes
// each: a million fit in a few hundred MB. Engine deadlines fire from ticks every 100 virtual
// ms. Borrows runner, evaluator and data. Single-threaded.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "compute/dataset.h"
#include "compute/partition.h"
#include "compute/trainer.h"
#include "simulations/task_runner.h"
#include "core/status.h"
#include "server/coordinator/async_engine.h"
#include "server/coordinator/sync_engine.h"

namespace plexus {

// Virtual devices. Compute: each client's time per local step is either spread geometrically
// from ms_per_step (the fastest) to ms_per_step x speed_ratio (the slowest), assigned in a seeded
// order, or, when speed_sigma > 0, log-normal: ms_per_step x exp(speed_sigma x Z), so ms_per_step
// is the median. Network: every transfer pays latency_ms, the model download num_params x 4 bytes
// at down_mbps and the update upload the same at up_mbps (0 = instantaneous), plus a fixed
// task_overhead_ms per task; with bandwidth_sigma > 0 each client's bandwidths (both ways) are
// scaled by its own log-normal factor exp(bandwidth_sigma x Z), median 1. Reliability: a task is abandoned with probability `dropout` (the
// client goes silent for as long as the task would have taken); with mean_on_s and mean_off_s
// set, each client alternates between exponential on and off periods with those means, polls
// only while on, and loses a task whose on period ends before the task does.
struct DeviceModel {
  double ms_per_step = 10.0;
  double speed_ratio = 1.0;        // slowest / fastest (geometric spread)
  double speed_sigma = 0.0;        // log-normal spread; replaces speed_ratio when > 0
  int64_t task_overhead_ms = 50;   // per task
  double latency_ms = 0.0;         // per transfer (one download, one upload per task)
  double down_mbps = 0.0;          // megabits per second; 0 = transfers take no time
  double up_mbps = 0.0;
  double bandwidth_sigma = 0.0;    // log-normal spread of the clients' bandwidths; 0 = all alike
  double dropout = 0.0;            // probability that a task is abandoned, in [0, 1)
  double mean_on_s = 0.0;          // availability periods; both 0 = always available
  double mean_off_s = 0.0;

  // Named profiles (docs/simulation.md has the table): uniform, heterogeneous, mobile.
  // InvalidArgument for another name.
  static Result<DeviceModel> Profile(const std::string& name);
  // InvalidArgument naming the bad field.
  Status Validate() const;
  // Time per local step of each of n clients.
  std::vector<double> Assign(size_t n, uint64_t seed) const;
  // Client i's bandwidth factor: exp(bandwidth_sigma x Z) from a seeded draw (1 when sigma is 0).
  double BandwidthFactor(size_t i, uint64_t seed) const;
  // Virtual milliseconds of one task: download, `steps` local steps at `ms_per_step`, upload, at
  // the bandwidths times `bandwidth_factor`.
  double TaskMs(int64_t steps, double ms_per_step, size_t model_bytes, double bandwidth_factor = 1.0) const;
};

struct SimOptions {
  int64_t clients = 10;           // virtual clients (N)
  std::string model = "mlp";
  PartitionSpec partition;        // how the training set is split among the N clients
  uint64_t seed = 0;              // model init, partition, sampling, speeds and batch order
  std::string mode = "sync";      // sync | async | semiasync
  SyncOptions sync;               // sync mode; its rounds and task also apply to the other modes
  AsyncOptions async;             // async and semiasync modes (rounds and task as in `sync`)
  DeviceModel devices;
  double server_mbps = 0.0;       // the server's link, each way, shared by all transfers (0 = unlimited)
  int64_t examples_per_client = 0;  // > 0: every client samples this many examples with
                                    // replacement (SampledPartition); 0: split the data among
                                    // the clients when it gives each at least 10, else sample 50
  int64_t max_tasks = 0;          // stop once this many tasks were trained (0 = no budget); the
                                  // run then ends with the versions published by then
  std::string attack = "none";    // what malicious clients do, see attack.h
  double attackers = 0.0;         // fraction of the clients that are malicious, chosen by the seed

  // InvalidArgument naming the first inconsistent field (e.g. more clients per round than
  // clients, an unknown mode or attack, bad device values); the engine options are checked
  // when the engine opens.
  Status Validate() const;
};

struct SimRound {
  RoundRecord record;
  double wall_time_s = 0.0;       // real time since the simulation started
  double virtual_time_s = 0.0;    // simulated time when the version was published
  int64_t bytes_down = 0;         // model bytes sent to clients so far (tasks handed out)
  int64_t bytes_up = 0;           // update bytes received so far
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
  int64_t tasks_dropped = 0;      // abandoned by their (virtual) device, or lost when it went off
  int64_t updates_refused = 0;    // e.g. too stale, or past a sync round's close
  int64_t attackers = 0;          // malicious clients
  int64_t examples_per_client = 0;  // > 0 when partitions were sampled with replacement
  std::string strategy;
};

// InvalidArgument for inconsistent options (e.g. more clients per round than clients).
// `on_round` (optional) is called after each published version, for progress output.
Result<SimResult> RunSimulation(const SimOptions& options, const Dataset& train, TaskRunner* runner,
                                ModelEvaluator* evaluator, const std::function<void(const SimRound&)>& on_round);

}  // namespace plexus
