// The CRDT replica simulation (`plexus sim --crdt-replicas N`): N replicas, each a node of an
// EventNetwork with its own access link, receive the same signed contributions in K random
// orders, with duplicates and delays, and gossip: every interval each replica asks a random peer
// for what it lacks (Merkle-digest delta sync; the answer carries the digest nodes and the
// contributions, and takes the links' time), optionally through a network partition that later
// heals. All must compute the same merged model for every strategy. One contribution is
// retracted (found poisoned) on one replica, and another is retracted on one replica while a
// second replica concurrently re-adds it, which must survive (add-wins). Deterministic for a
// seed. Single-threaded.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/status.h"

namespace plexus {

struct CrdtSimOptions {
  int64_t replicas = 100;
  int64_t orderings = 20;
  int64_t contributions = 12;   // one per author
  bool partition_heal = false;  // the two halves cannot reach each other for 10 intervals
  double gossip_interval_ms = 1000.0;
  double latency_ms = 50.0;  // every replica's access link
  double mbps = 10.0;        // up and down; 0 = unlimited
  std::vector<std::string> strategies = {"fedavg", "median", "trimmed_mean:beta=0.2", "ties:density=0.3", "dare:p=0.3"};
  uint64_t seed = 0;
};

struct CrdtOrdering {
  int64_t ordering = 0;
  bool identical = false;           // every replica, every strategy
  std::vector<std::string> hashes;  // replica 0's merged model per strategy (SHA-256)
  int64_t gossip_rounds = 0;        // intervals until every replica's state digest was equal
  double converged_s = 0.0;         // virtual time until then
  int64_t messages = 0;             // delivered, and their bytes
  uint64_t bytes = 0;
  int64_t messages_lost = 0;  // sent across the partition
  int64_t node_hashes = 0;    // Merkle node hashes compared in all syncs
  int64_t live = 0;           // live contributions at the end
};

// InvalidArgument for bad options. `on_ordering` (optional) sees each ordering's result.
Result<std::vector<CrdtOrdering>> RunCrdtSimulation(const CrdtSimOptions& options,
                                                    const std::function<void(const CrdtOrdering&)>& on_ordering);

}  // namespace plexus
