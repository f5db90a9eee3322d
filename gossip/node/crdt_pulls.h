// CrdtPulls: the CRDT gossip's pulls of one peer node (gossip/protocol/crdt.cpp asks for them as
// Actions::Sync), and its answers to other peers' pulls. A pull syncs a copy of this node's
// replica from a peer's one pull at a time, driven on the loop: a CrdtPull (crdt_sync.h) says
// which Merkle-digest questions to send as plexus.v1.CrdtRequest (all of a level at once), the
// replies and the fetched contributions' deltas (model streams) are fed back as they arrive, and
// a question unanswered for kAnswerTimeout fails the pull (Tick). Only the join, which verifies
// every fetched contribution's signature, runs on a libuv worker; no thread ever waits on the
// loop. The protocol then joins the copy (Synced).
//
// Borrows the links, the loop's work and the author keys. Loop thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "crdt/signing.h"
#include "gossip/node/crdt_sync.h"
#include "gossip/node/loop_work.h"
#include "gossip/node/peer_links.h"
#include "gossip/protocol/protocol.h"

namespace plexus::gossip {

class CrdtPulls {
 public:
  // What the pulls need of the node: its replica of a round (null: none), the link to a peer
  // (dialled if need be; null: unreachable), and where a finished pull's copy goes (null: the
  // pull failed), a new message carrying the node's membership rumours, and the loop's clock.
  struct Hooks {
    std::function<v1::GossipEnvelope()> envelope;
    std::function<const CrdtReplica*(uint64_t round)> replica;
    std::function<PeerLinks::Link*(NodeId peer)> link_to;
    std::function<void(NodeId from, uint64_t round, const CrdtReplica* synced)> synced;
    std::function<double()> now_ms;
  };

  // How long a pull waits for a peer's answer to one question before it gives up on that pull.
  static constexpr double kAnswerTimeoutMs = 20'000;

  CrdtPulls(NodeId self, size_t nodes, PeerLinks* links, LoopWork* work, const AuthorKeys* keys, Hooks hooks);

  // Queues a pull (one per peer and round at a time) and starts it when none runs.
  void Queue(const Actions::Sync& sync);
  // A peer asks about this node's `replica`: the answer, then the fetched contributions' deltas
  // as model streams (the reply goes out first: control frames precede chunks).
  void Answer(PeerLinks::Link* link, const CrdtReplica* replica, const v1::CrdtRequest& request);
  // A reply to one of this node's questions arrived on `link`: its deltas are expected as model
  // streams. InvalidArgument for a reply nobody asked for on that link, or a stream the link
  // cannot take; the caller refuses the link.
  Status ReplyArrived(PeerLinks::Link* link, const v1::CrdtReply& reply);
  // A delta of a reply, decoded and checked (`model` holds the error otherwise), with the codec
  // bytes it was decoded from (null: it came as float32). InvalidArgument when it is bad or out
  // of place (the pull then fails); Ok when it was used or nobody waits for it any more.
  Status DeltaDecoded(NodeId from, const v1::GossipModel& header, Result<ModelState> model,
                      std::shared_ptr<const std::string> coded = nullptr);
  // The pull fails if its link closed.
  void LinkClosed(PeerLinks::Link* link, const std::string& why);
  // The pull fails if a question has waited longer than kAnswerTimeoutMs; questions of ended
  // pulls still unanswered after twice that are forgotten.
  void Tick();
  // The node leaves: queued pulls are dropped, the running one fails (a join already on a
  // worker finishes first), and answers still on their way are read and dropped.
  void Stop();
  bool in_flight() const { return pull_.has_value(); }

 private:
  struct Pull {
    Actions::Sync sync;
    std::shared_ptr<CrdtReplica> copy;
    CrdtPull machine;
    bool joining = false;  // its delta is being verified and joined on a worker
    std::string failed;    // why it cannot go on, when it found so where ending it at once would
                           // reenter the protocol (Queue); Tick ends it
  };
  struct Pending {
    PeerLinks::Link* link;
    v1::CrdtRequest request;
    double asked_ms;
    CrdtAnswer answer;
    size_t deltas_left = 0;
    bool abandoned = false;  // its pull has ended: the answer is read and dropped
  };

  void Pump();
  // Sends what the pull asks next; joins once it has everything.
  void Advance();
  void Answered(std::map<uint64_t, Pending>::iterator it);
  // The running pull ends: `synced` null for a failure (`why`).
  void End(const CrdtReplica* synced, const std::string& why);

  const NodeId self_;
  const size_t nodes_;
  PeerLinks* const links_;
  LoopWork* const work_;
  const AuthorKeys* const keys_;
  const Hooks hooks_;
  bool stopped_ = false;
  std::deque<Actions::Sync> queue_;
  std::optional<Pull> pull_;
  std::map<uint64_t, Pending> pending_;  // questions sent, by request id
  uint64_t next_request_ = 1;
};

}  // namespace plexus::gossip
