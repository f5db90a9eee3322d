// The CRDT gossip's network side (gossip/protocol/crdt.cpp): crdt's SyncPeer seam over a peer
// link. A node pulling from a peer runs CrdtReplica::SyncFrom with a NetworkSyncPeer, whose
// digest questions and fetches travel as plexus.v1.CrdtRequest messages; the peer answers them
// from its replica of that round with AnswerCrdtRequest, and a fetched contribution's delta
// follows its reply as a model stream (checked by size, SHA-256, layout and finiteness like every
// model, then verified by its author's signature when joined).
// NetworkSyncPeer blocks on its Ask for every question, so it runs off the event loop (the node
// runs a pull on a worker thread); it is thread-compatible. AnswerCrdtRequest is a pure function.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/model_state.h"
#include "core/status.h"
#include "crdt/contribution.h"
#include "crdt/crdt_replica.h"
#include "crdt/sync_peer.h"
#include "plexus/v1/gossip.pb.h"

namespace plexus::gossip {

// A peer's answer: its reply and the deltas of the contributions it ships, in reply order.
struct CrdtAnswer {
  v1::CrdtReply reply;
  std::vector<ModelState> deltas;
};

// The reply to `request` from `replica` (null: a replica with nothing in it). The deltas of the
// contributions a fetch ships go to `deltas` in reply order; their stream, size and hash fields
// are the caller's to fill in.
v1::CrdtReply AnswerCrdtRequest(const CrdtReplica* replica, const v1::CrdtRequest& request,
                                std::vector<std::shared_ptr<const ModelState>>* deltas);

class NetworkSyncPeer final : public SyncPeer {
 public:
  // Sends one request to the peer's replica and returns its answer (Unavailable when none comes).
  using Ask = std::function<Result<CrdtAnswer>(v1::CrdtRequest)>;

  // Questions about the peer's replica of `round`. Contributions of authors whose keys `keys`
  // (borrowed) does not hold yet are left out of fetches: they could not be verified now, and a
  // later pull brings them once the author's key is known.
  NetworkSyncPeer(uint64_t round, Ask ask, const AuthorKeys* keys);

  const DigestSource& digest() override { return source_; }
  Result<StateDelta> Fetch(const std::vector<std::string>& entries) override;

 private:
  Result<v1::CrdtReply> AskReply(v1::CrdtRequest request);

  const uint64_t round_;
  Ask ask_;
  const AuthorKeys* keys_;
  DigestSource source_;
};

}  // namespace plexus::gossip
