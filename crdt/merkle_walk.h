// MerkleWalk: finding the entries another replica holds and this one lacks (MerkleDigest), as a
// step-driven state machine: it says which questions to ask about the other side's digest (a
// node's hash, or the entries under a prefix), takes their answers in any order, and descends
// only into subtrees whose hashes differ. Nothing in it waits: a network pull sends every
// question it is given at once (the 16 children of a differing node travel together, one round
// trip per level) and feeds the answers back as they come; MissingFrom drives it against a
// DigestSource at hand. Owns its copy of this replica's digest. Thread-compatible.
#pragma once

#include <cstddef>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/status.h"
#include "crdt/merkle_digest.h"

namespace plexus {

class MerkleWalk {
 public:
  struct Question {
    enum Kind { kNode, kEntriesUnder };
    Kind kind;
    std::string prefix;
    bool operator<(const Question& o) const { return std::tie(kind, prefix) < std::tie(o.kind, o.prefix); }
  };

  // Starts at the root: the first question is the other side's root hash.
  explicit MerkleWalk(MerkleDigest mine);

  // The questions to ask now (each once); they stay outstanding until answered.
  std::vector<Question> TakeQuestions();
  // The other side's node at `prefix` ("" hash: no entry there). InvalidArgument for a question
  // that is not outstanding (the walk is unchanged).
  Status NodeAnswered(const std::string& prefix, const std::string& hash, bool leaf);
  // The other side's entries under `prefix`. InvalidArgument as above.
  Status EntriesAnswered(const std::string& prefix, const std::vector<std::string>& entries);

  // No question is waiting to be taken or answered.
  bool done() const { return queued_.empty() && outstanding_.empty(); }
  // What the other side holds and this one does not, sorted (complete once done()).
  std::vector<std::string> missing() const { return {missing_.begin(), missing_.end()}; }
  // Node hashes compared so far (the messages a network exchange needs, entry lists aside).
  size_t node_hashes() const { return node_hashes_; }

 private:
  Status Answered(const Question& q);

  MerkleDigest mine_;
  std::vector<Question> queued_;
  std::set<Question> outstanding_;
  std::set<std::string> missing_;
  size_t node_hashes_ = 0;
};

}  // namespace plexus
