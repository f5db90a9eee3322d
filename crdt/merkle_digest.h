// MerkleDigest: a Merkle tree over a set of entries, for finding what two replicas' sets differ
// in without sending either set. Entries are keyed by their SHA-256 (hex); a node covers the keys
// that share its hex prefix, and its hash is the SHA-256 of its 16 children's hashes, or of its
// keys once it holds at most kLeafSize of them. MissingFrom descends only into nodes whose hashes
// differ: about d x log16(n) node hashes for d differing entries out of n. Immutable after
// construction; thread-safe to read.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace plexus {

class MerkleDigest {
 public:
  static constexpr size_t kLeafSize = 4;

  explicit MerkleDigest(const std::vector<std::string>& entries);

  // The root hash (hex); equal roots mean equal sets.
  const std::string& Root() const { return root_; }
  size_t size() const { return keys_.size(); }

  // The node at `prefix` ("" for the root): its hash ("" if no key has that prefix) and whether
  // it is a leaf.
  std::pair<std::string, bool> Node(const std::string& prefix) const;
  // The entries whose keys start with `prefix`.
  std::vector<std::string> EntriesUnder(const std::string& prefix) const;

 private:
  std::string Build(const std::string& prefix, size_t begin, size_t end);

  std::vector<std::pair<std::string, std::string>> keys_;  // (key, entry), sorted by key
  std::map<std::string, std::pair<std::string, bool>> nodes_;
  std::string root_;
};

// Where the other side's digest comes from: its node at a prefix, and its entries under one.
// A remote peer answers these over the network; a local one from a MerkleDigest.
struct DigestSource {
  std::function<Result<std::pair<std::string, bool>>(const std::string& prefix)> node;
  std::function<Result<std::vector<std::string>>(const std::string& prefix)> entries_under;
};

// The entries the other side holds and `mine` does not, asking only about subtrees whose hashes
// differ. *node_hashes counts the node hashes compared (the messages a network exchange needs,
// entry lists of differing leaves aside).
Result<std::vector<std::string>> MissingFrom(const MerkleDigest& mine, const DigestSource& theirs, size_t* node_hashes);
// The same against a digest at hand.
std::vector<std::string> MissingFrom(const MerkleDigest& mine, const MerkleDigest& theirs, size_t* node_hashes);

}  // namespace plexus
