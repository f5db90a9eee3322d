// The decentralized simulator (`plexus sim --mode gossip`): N gossip nodes, no server, in virtual
// time on the event network (simulations/event_network.h), each node one gossip::Protocol object
// (gossip/protocol/), the very objects a networked peer runs. The driver only carries out what
// the nodes ask: it delivers messages over each node's access link (the device model's latency
// and bandwidth), fires timers, and trains through the TaskRunner seam (so `mpirun` spreads the
// training and the result stays the same bit for bit). It also plays the world around them:
// attackers (whose outgoing models it replaces), churn (nodes leave gracefully and rejoin,
// fetching a neighbour's model first), and a partition that heals. Semi-decentralized runs have
// one more node, id N, the server, with an unlimited link.
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
  bool train = true;            // false: models are moved and merged, nothing trained (nodes start apart)
  double churn_fraction = 0.0;  // every churn_every rounds this fraction of the nodes leaves, and
  int64_t churn_every = 0;      // those that left the time before rejoin
  int64_t partition_at = -1;    // the network splits in two halves after this round ...
  int64_t heal_at = -1;         // ... and heals after this one
  int64_t eval_nodes = 16;      // honest nodes whose own model is evaluated each round

  // InvalidArgument naming the flag: e.g. an unknown spec, a topology impossible for N, more
  // attackers than nodes, a heal before the partition.
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
  int64_t rounds_to_recover = -1;  // after the heal, until consensus distance is back under its
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
