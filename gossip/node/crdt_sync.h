// The CRDT gossip's network side (gossip/protocol/crdt.cpp). A node pulling a peer's replica of
// a round runs a CrdtPull: a step-driven state machine whose Merkle-digest questions (MerkleWalk)
// and final fetch travel as plexus.v1.CrdtRequest messages; the peer answers them from its
// replica of that round with AnswerCrdtRequest, and a fetched contribution's delta follows its
// reply as a model stream (checked by size, SHA-256, layout and finiteness like every model,
// then verified by its author's signature when joined). Nothing here waits or does I/O: the
// peer node sends what TakeRequests gives and feeds the answers back on its loop, tests drive it
// in a loop of calls. CrdtPull is thread-compatible; AnswerCrdtRequest is a pure function.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/model_state.h"
#include "core/status.h"
#include "crdt/contribution.h"
#include "crdt/crdt_replica.h"
#include "crdt/merkle_walk.h"
#include "crdt/sync_peer.h"
#include "plexus/v1/gossip.pb.h"

namespace plexus::gossip {

// A peer's answer: its reply and the deltas of the contributions it ships, in reply order, each
// with the codec bytes it travelled in (null where it came as float32).
struct CrdtAnswer {
  v1::CrdtReply reply;
  std::vector<ModelState> deltas;
  std::vector<std::shared_ptr<const std::string>> coded;
};

// A shipped contribution's delta: its float32 values, and the codec bytes it travels in instead
// when it has them (the reply's contribution then names the codec).
struct ShippedDelta {
  std::shared_ptr<const ModelState> values;
  std::shared_ptr<const std::string> coded;
};

// The reply to `request` from `replica` (null: a replica with nothing in it). The deltas of the
// contributions a fetch ships go to `deltas` in reply order; their stream, size and hash fields
// are the caller's to fill in.
v1::CrdtReply AnswerCrdtRequest(const CrdtReplica* replica, const v1::CrdtRequest& request,
                                std::vector<ShippedDelta>* deltas);

class CrdtPull {
 public:
  // Pulls the peer's replica of `round` into what `mine` lacks (its entries are read now). Contributions of
  // authors whose keys `keys` (borrowed) does not hold yet are left out of the fetched delta: they
  // could not be verified now, and a later pull brings them once the author's key is known.
  CrdtPull(uint64_t round, const CrdtReplica& mine, const AuthorKeys* keys);

  // The requests to send now (round set, id left to the caller); each is answered once.
  std::vector<v1::CrdtRequest> TakeRequests();
  // The peer's answer to `request`, one that TakeRequests gave. Unavailable when the peer could
  // not answer, InvalidArgument when the answer is malformed or unasked for: the pull has failed.
  Status Answered(const v1::CrdtRequest& request, CrdtAnswer answer);
  // Nothing left to ask or wait for: delta() is what the peer holds and `mine` lacks.
  bool done() const { return walk_.done() && (walk_.missing().empty() || delta_.has_value()); }
  // The sub-state to join (CrdtReplica::Restore verifies it); empty when nothing was missing.
  const StateDelta& delta() const { return delta_ ? *delta_ : empty_; }
  StateDelta TakeDelta() { return delta_ ? std::move(*delta_) : StateDelta{}; }
  size_t node_hashes() const { return walk_.node_hashes(); }

 private:
  Result<StateDelta> DeltaOf(CrdtAnswer answer) const;

  const uint64_t round_;
  const AuthorKeys* const keys_;
  MerkleWalk walk_;
  bool fetch_sent_ = false;
  std::optional<StateDelta> delta_;
  const StateDelta empty_;
};

}  // namespace plexus::gossip
