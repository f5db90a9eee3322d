// CrdtReplica: one replica of a CRDT-wrapped merge (../shared/design/algorithms.md section 6).
// Layer 1 is a ContributionSet (add-wins OR-Set) of contribution ids plus a content-addressed
// store of the verified contributions; layer 2, Resolve, applies any strategy from aggregators/
// once to the live contributions in id (hash) order, so the merged bytes depend only on the set:
// replicas that have seen the same adds and retractions, in whatever order and however often,
// compute identical models. Strategies that draw random numbers (DARE) are seeded from the live
// set's root hash. Sync ships only what the other side lacks, found with Merkle digests.
//
// Borrows the AuthorKeys (must outlive it). Thread-compatible.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/model_state.h"
#include "core/status.h"
#include "crdt/contribution.h"
#include "crdt/contribution_set.h"
#include "crdt/sync_peer.h"

namespace plexus {

class CrdtReplica {
 public:
  CrdtReplica(std::string replica_id, const AuthorKeys* keys)
      : id_(replica_id), keys_(keys), set_(std::move(replica_id)) {}

  // Verifies `c` (AuthorKeys::Verify) and adds it under a fresh dot; returns its id. A refused
  // contribution changes nothing.
  Result<std::string> Add(const Contribution& c);
  // Retracts a live contribution (e.g. one found poisoned). NotFound when it is not live here.
  Status Retract(const std::string& id);

  // Full-state join: the other's set, and its contributions this replica lacks (each verified;
  // if any fails, nothing is joined).
  Status Join(const CrdtReplica& other);
  // Delta-state sync from a peer: finds the entries this replica lacks with Merkle digests and
  // joins only those, with the contributions they need (verified; on any failure nothing is
  // joined). Returns the node hashes compared.
  Result<size_t> SyncFrom(SyncPeer& peer);
  // The same with a replica in this process (through a LocalPeer).
  Result<size_t> SyncFrom(const CrdtReplica& other);
  // Joins a saved or received state: its set and the contributions it references (verified).
  Status Restore(const ContributionSet& set, const std::map<std::string, Contribution>& contributions) {
    return JoinVerified(set, contributions);
  }

  const std::string& replica_id() const { return id_; }
  const ContributionSet& set() const { return set_; }
  std::vector<std::string> LiveIds() const { return set_.Live(); }
  // A held contribution (live or retracted), or nullptr.
  const Contribution* Find(const std::string& id) const;
  const std::map<std::string, Contribution>& contributions() const { return store_; }
  // Merkle root over the set's entries (adds and tombstones): equal iff the states are equal.
  std::string StateDigest() const;
  // SHA-256 over the sorted live ids: seeds stochastic strategies.
  std::string LiveRoot() const;

  // The merged model: `strategy` (a spec from aggregators/registry.h) over the live
  // contributions' deltas in id order, applied to `base`. A "dare" spec without a seed gets one
  // from LiveRoot(). FailedPrecondition when nothing is live; the strategy's errors otherwise.
  Result<ModelState> Resolve(const std::string& strategy, const ModelState& base) const;

 private:
  // Joins `delta` after verifying the contributions it references that this replica lacks.
  Status JoinVerified(const ContributionSet& delta, const std::map<std::string, Contribution>& source);

  const std::string id_;
  const AuthorKeys* const keys_;
  ContributionSet set_;
  std::map<std::string, Contribution> store_;  // every verified contribution by id (kept for re-adds)
};

}  // namespace plexus
