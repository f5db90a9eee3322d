// The in-process simulator: runs the real coordinator engine (sync, async or semiasync) with N
// virtual clients in virtual time, with a ManualClock and a MemoryStore, no sockets and no
// threads, so the same seed gives the same result bit for bit. It runs on the general event core
// (simulations/event_network.h): the server and every client are nodes with links, and a task is
// a model download (a message), the local steps (a timer) and the update upload (a message); a
// client polls; when it gets a task its training job goes to the TaskRunner (on the model the
// task names) and its update is submitted when the upload has arrived; then it polls again. A
// client told to wait is parked at no cost and polls again when the engine's poll epoch moves
// (or every half client timeout, to stay connected), so idle clients cost a few hundred bytes
// each: a million fit in a few hundred MB. What a client does with each answer (train, wait, skip
// a task whose update was refused, back off after refusals) is decided by the ClientSession that
// `plexus client` runs (client/client_session.h); a client's session is kept only while it
// remembers something (ClientSession::at_rest), so idle clients still cost nothing more. Engine deadlines fire from
// ticks every 100 virtual ms. Borrows runner, evaluator and data. Single-threaded.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "compute/dataset.h"
#include "compute/partition.h"
#include "compute/trainer.h"
#include "core/status.h"
#include "server/coordinator/async_engine.h"
#include "server/coordinator/mode.h"
#include "server/coordinator/sync_engine.h"
#include "simulations/device_model.h"
#include "simulations/task_runner.h"

namespace plexus {

struct SimOptions {
  int64_t clients = 10;  // virtual clients (N)
  std::string model = "mlp";
  // The model to start from when set (a user's TorchScript weights); otherwise the built-in
  // `model` initialized from the seed.
  std::shared_ptr<const ModelState> initial;
  PartitionSpec partition;  // how the training set is split among the N clients
  uint64_t seed = 0;        // model init, partition, sampling, speeds and batch order
  Mode mode = Mode::kSync;
  SyncOptions sync;    // sync mode; its rounds and task also apply to the other modes
  AsyncOptions async;  // async and semiasync modes (rounds and task as in `sync`)
  DeviceModel devices;
  double server_mbps = 0.0;         // the server's link, each way, shared by all transfers (0 = unlimited)
  int64_t examples_per_client = 0;  // > 0: every client samples this many examples with
                                    // replacement (SampledPartition); 0: split the data among
                                    // the clients when it gives each at least 10, else sample 50
  int64_t max_tasks = 0;            // stop once this many tasks were trained (0 = no budget); the
                                    // run then ends with the versions published by then
  std::string attack = "none";      // what malicious clients do, see attack.h
  double attackers = 0.0;           // fraction of the clients that are malicious, chosen by the seed
  std::string codec;                // compression of the uploads (compression/codec.h); empty: float32 as is
  // Local DP (`--dp local:clip=C,noise=Z`, as `plexus client`): each honest client clips its
  // update to L2 norm C and adds N(0, (Z·C)²) to every value before it is encoded and sent, from a
  // stream seeded per client and task. 0: off.
  double local_dp_clip = 0;
  double local_dp_noise = 0;
  // Compression of the downloads (CodedDownloads, as `plexus server --download-codec`): each
  // client trains from the model it rebuilds; empty: float32.
  std::string download_codec;
  // With secure aggregation (sync.secagg): the share of the group's members that drop out of
  // each round, each at a stage drawn uniformly (advertise keys, share keys, masked input,
  // unmask), going silent there as `plexus client --quit-at-secagg-stage` does.
  double secagg_dropout = 0;
  // A tree of edge aggregators between the clients and the server (issue 41; sync mode with
  // fedavg_exact): client i reports to edge i mod `edges`. An edge fetches each model version from
  // the server once and serves its clients from it, takes their updates and forwards them as one
  // partial sum (ExactSum's bytes: 8 per value) as soon as every task it handed out on that version
  // has reported. Edges have their own access link. 0: no edges, clients talk to the server.
  int64_t edges = 0;
  double edge_mbps = 1000.0;     // each edge's link, each way (0 = unlimited)
  double edge_latency_ms = 5.0;  // per transfer over an edge's link

  // InvalidArgument naming the first inconsistent field (e.g. more clients per round than
  // clients, an unknown mode or attack, bad device values); the engine options are checked
  // when the engine opens.
  Status Validate() const;
};

struct SimRound {
  RoundRecord record;
  double wall_time_s = 0.0;     // real time since the simulation started
  double virtual_time_s = 0.0;  // simulated time when the version was published
  int64_t bytes_down = 0;       // model bytes sent to clients so far (tasks handed out)
  int64_t bytes_up = 0;         // update bytes received so far (encoded, with --codec)
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
  int64_t tasks_dropped = 0;    // abandoned by their (virtual) device, or lost when it went off
  int64_t updates_refused = 0;  // e.g. too stale, or past a sync round's close
  // Polls a client put off because of refusals, as `plexus client` does (ClientSession): after a
  // refused update's task was handed out again, or after refusals for the same reason in a row.
  int64_t waits_after_refusals = 0;
  int64_t attackers = 0;               // malicious clients
  int64_t local_dp_most_releases = 0;  // with local DP: the most noised updates one client sent
  int64_t examples_per_client = 0;     // > 0 when partitions were sampled with replacement
  std::string strategy;
  // With secure aggregation: what the groups cost, measured as the run went (the members' and
  // the server's real CPU, charged to the virtual devices and server as it was spent).
  struct SecureAggregation {
    int64_t groups_done = 0;
    int64_t groups_aborted = 0;
    int64_t members_done = 0;     // members that finished: their update in a published mean
    int64_t members_dropped = 0;  // by --secagg-dropout
    int64_t members_failed = 0;   // left out by the group (late, or the group aborted)
    double member_cpu_ms = 0;     // mean per finished member and round, beyond training
    double member_cpu_ms_max = 0;
    double server_call_ms_max = 0;    // the server's longest call (an unmasking, or a publication and its evaluation)
    double unmask_ms_max = 0;         // the longest unmasking
    double key_bytes_per_member = 0;  // keys, shares and reveals sent, mean per finished member
    double masked_bytes_per_member = 0;  // the masked update
  };
  std::optional<SecureAggregation> secagg;
};

class ClientData;

// A synchronous round closes at its deadline only with --min-clients updates in: when fewer
// clients than that can ever finish a task (download, local steps, upload) within the deadline,
// every round would fail forever. InvalidArgument naming the flags to change; RunSimulation
// calls it in sync mode before anything runs.
Status CheckRoundsCanClose(const SimOptions& o, const ClientData& data, size_t num_params);

// InvalidArgument for inconsistent options (e.g. more clients per round than clients).
// `on_round` (optional) is called after each published version, for progress output.
Result<SimResult> RunSimulation(const SimOptions& options, const Dataset& train, TaskRunner* runner,
                                ModelEvaluator* evaluator, const std::function<void(const SimRound&)>& on_round);

}  // namespace plexus
