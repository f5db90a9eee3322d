// The CRDT replica simulation (`plexus sim --crdt-replicas N`): N replicas receive the same signed
// contributions in K random orders, with duplicates and delays, gossip with Merkle-digest
// delta sync, optionally through a network partition that later heals, and must all compute the
// same merged model for every strategy. One contribution is retracted (found poisoned) on one
// replica, and another is retracted on one replica while a second replica concurrently re-adds
// it, which must survive (add-wins). Deterministic for a seed. Single-threaded.
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
  bool partition_heal = false;  // gossip inside two halves first, then across
  std::vector<std::string> strategies = {"fedavg", "median", "trimmed_mean:beta=0.2", "ties:density=0.3",
                                         "dare:p=0.3"};
  uint64_t seed = 0;
};

struct CrdtOrdering {
  int64_t ordering = 0;
  bool identical = false;             // every replica, every strategy
  std::vector<std::string> hashes;    // replica 0's merged model per strategy (SHA-256)
  int64_t gossip_rounds = 0;          // until every replica's state digest was equal
  int64_t node_hashes = 0;            // Merkle node hashes compared in all syncs
  int64_t live = 0;                   // live contributions at the end
};

// InvalidArgument for bad options. `on_ordering` (optional) sees each ordering's result.
Result<std::vector<CrdtOrdering>> RunCrdtSimulation(const CrdtSimOptions& options,
                                                    const std::function<void(const CrdtOrdering&)>& on_ordering);

}  // namespace plexus
