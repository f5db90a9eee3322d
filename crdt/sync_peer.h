// SyncPeer: what a replica asks another during anti-entropy (delta-state sync with Merkle
// digests). It is the seam where a transport plugs in: gossip over the network implements it
// with requests to a remote replica; LocalPeer answers from a replica in this process (tests,
// the simulator). Implementations say their own thread-safety; LocalPeer borrows its replica and
// is thread-compatible.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "crdt/contribution.h"
#include "crdt/contribution_set.h"
#include "crdt/merkle_digest.h"

namespace plexus {

class CrdtReplica;

// What a peer ships: the sub-state made of the asked entries, and the contributions its adds
// reference.
struct StateDelta {
  ContributionSet set{""};
  std::map<std::string, Contribution> contributions;
};

class SyncPeer {
 public:
  virtual ~SyncPeer() = default;
  // The peer's digest, asked node by node.
  virtual const DigestSource& digest() = 0;
  // The sub-state of the given entries (unknown entries are skipped) with its contributions.
  virtual Result<StateDelta> Fetch(const std::vector<std::string>& entries) = 0;
};

class LocalPeer final : public SyncPeer {
 public:
  // Takes a digest of `replica` now; later changes to the replica are not seen.
  explicit LocalPeer(const CrdtReplica& replica);
  const DigestSource& digest() override { return source_; }
  Result<StateDelta> Fetch(const std::vector<std::string>& entries) override;

 private:
  const CrdtReplica& replica_;
  MerkleDigest digest_;
  DigestSource source_;
};

}  // namespace plexus
