// The decentralized simulator (`plexus sim --mode gossip`): N gossip nodes, no server, in virtual
// time on the event network (simulations/event_network.h), each node one gossip::Protocol object
// (gossip/protocol/), the very objects a networked peer runs. The driver only carries out what
// the nodes ask: it delivers messages over each node's access link (the device model's latency
// and bandwidth), fires timers, and trains through the TaskRunner seam (so `mpirun` spreads the
// training and the result stays the same bit for bit). It also plays the world around them:
// attackers (whose outgoing models it replaces), churn (nodes leave and rejoin, fetching a
// neighbour's model first), and a partition that heals. Semi-decentralized runs have one more
// node, id N, the server, with an unlimited link.
//
// Who is alive each node learns as a networked peer does: by SWIM (gossip/membership/), its
// probes travelling the event network as control messages (ahead of queued model bytes, as a
// peer's control frames go before its chunks) and its rumours piggybacked on every message; a
// churned node crashes silently and the others must suspect it, bury it, and take it back when
// it returns with a higher incarnation; a partition makes each half bury the other until reconnect
// pings find them again after the heal. SWIM holds every member at every node (O(N^2) memory), so
// `liveness` "auto" runs it up to 512 nodes and above that an oracle: the driver tells each node at
// once who left gracefully and who came back.
//
// A round r is measured once every live node has completed it: the average model of the live
// honest nodes (test accuracy, SHA-256), the accuracy of a sample of the honest nodes' own models
// on a test subset (mean and minimum), the consensus distance sqrt(1/n sum ||x_i - mean||^2),
// bytes sent per node and virtual time. Single-threaded; deterministic for a seed.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "compute/dataset.h"
#include "compute/partition.h"
#include "core/status.h"
#include "core/task.h"
#include "server/coordinator/evaluator.h"
#include "simulations/device_model.h"
#include "simulations/task_runner.h"

namespace plexus {

struct GossipSimOptions {
  int64_t nodes = 16;
  int64_t rounds = 20;
  std::string model = "mlp";
  // A user's model's weights (a TorchScript file's), every node's start; null: InitModel(model).
  std::shared_ptr<const ModelState> initial;
  PartitionSpec partition;
  uint64_t seed = 0;
  std::string gossip = "el:s=3";  // gossip/protocol/registry.h
  std::string merge = "mean";     // gossip/protocol/neighbour_merge.h
  std::string topology;           // gossip/protocol/topology.h; empty: the algorithm's own
  TaskHyperparams task;           // local training per round
  DeviceModel devices;            // compute speed, latency and bandwidth of each node
  int64_t examples_per_client = 0;
  std::string attack = "none";  // simulations/attack.h; pushsum takes labelflip only
  double attackers = 0.0;
  bool train = true;              // false: models are moved and merged, nothing trained (nodes start apart)
  double churn_fraction = 0.0;    // every churn_every rounds this fraction of the nodes leaves, and
  int64_t churn_every = 0;        // those that left the time before rejoin
  int64_t partition_at = -1;      // the network splits in two halves after this round ...
  int64_t heal_at = -1;           // ... and heals after this one
  int64_t eval_nodes = 16;        // honest nodes whose own model is evaluated each round
  std::string liveness = "auto";  // swim, oracle, or auto (swim up to kMaxAutoSwimNodes nodes)

  static constexpr int64_t kMaxAutoSwimNodes = 512;
  static constexpr int64_t kMaxSwimNodes = 4096;  // beyond, N^2 members do not fit in memory
  // Whether this run's nodes learn liveness by SWIM (else the oracle).
  bool swim() const { return liveness == "swim" || (liveness == "auto" && nodes <= kMaxAutoSwimNodes); }

  // InvalidArgument naming the flag: e.g. an unknown spec, a topology impossible for N, more
  // attackers than nodes, a heal before the partition, SWIM for more than kMaxSwimNodes.
  Status Validate() const;
};

struct GossipRound {
  int64_t round = 0;
  int64_t live_nodes = 0;
  double test_accuracy = 0.0;  // of the average model of the live honest nodes
  double test_loss = 0.0;
  double mean_node_accuracy = 0.0;  // the sampled honest nodes' own models
  double min_node_accuracy = 0.0;
  double consensus_distance = 0.0;
  double mean_train_loss = 0.0;  // over the honest nodes that trained this round
  double bytes_sent_per_node = 0.0;
  double virtual_time_s = 0.0;
  double wall_time_s = 0.0;
  bool partitioned = false;
  // SWIM runs (zeros with the oracle), counted over every node since the start: suspicions
  // raised, suspects declared dead, rumours of their own death or suspicion nodes refuted; and,
  // at this round, the (live node, other node) pairs where the live node's view of the other's
  // liveness is wrong (a crash not yet detected, or a return not yet heard of).
  int64_t suspicions = 0;
  int64_t deaths = 0;
  int64_t refutations = 0;
  int64_t membership_errors = 0;
  double membership_bytes_per_node = 0.0;  // probes and piggybacked rumours, not in bytes_sent_per_node
};

struct GossipResult {
  std::vector<GossipRound> rounds;
  std::string gossip, merge, topology;  // as run, e.g. "el(s=3,wait_ms=1000)", "mean", "complete"
  double final_test_accuracy = 0.0;
  double mean_node_accuracy = 0.0;
  double min_node_accuracy = 0.0;
  double consensus_distance = 0.0;
  double bytes_sent_per_node = 0.0;
  int64_t rounds_completed = 0;
  std::string final_model_sha256;  // of the average model
  ModelState final_model;
  int64_t attackers = 0;
  int64_t messages_lost = 0;  // dropped by a partition, or sent to a node that had left
  int64_t trainings = 0;
  bool swim = false;                                    // liveness by SWIM (else the oracle)
  int64_t suspicions = 0, deaths = 0, refutations = 0;  // over the run (SWIM)
  int64_t rounds_to_recover = -1;                       // after the heal, until consensus distance is back under its
                                                        // pre-partition level (-1: no partition, or not within the run)
  double virtual_time_s = 0.0;
  double wall_time_s = 0.0;
};

// `runner` trains (may be null when options.train is false); `average_evaluator` rates the
// average model, `node_evaluator` the nodes' own (a smaller test subset); neither runs without
// training (options.train false), when they may be null. `on_round` (optional) runs after each measured round.
Result<GossipResult> RunGossipSimulation(const GossipSimOptions& options, const Dataset* train, TaskRunner* runner,
                                         ModelEvaluator* average_evaluator, ModelEvaluator* node_evaluator,
                                         const std::function<void(const GossipRound&)>& on_round);

}  // namespace plexus
