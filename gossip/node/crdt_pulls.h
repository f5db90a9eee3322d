// CrdtPulls: the CRDT gossip's pulls of one peer node (gossip/protocol/crdt.cpp asks for them as
// Actions::Sync), and its answers to other peers' pulls. A pull syncs a copy of this node's
// replica from a peer's (crdt_sync.h: Merkle-digest questions as plexus.v1.CrdtRequest, fetched
// contributions' deltas as model streams) one pull at a time, on a thread of its own whose
// questions go out through the loop; the loop keeps answering everyone meanwhile, and libuv's
// workers stay free for decoding and training. The protocol then joins the copy (Synced).
//
// Borrows the links, the loop's work and the author keys. Loop thread only (the pull thread only
// touches its copy and posts to the loop).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
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
  // pull failed), and a new message carrying the node's membership rumours.
  struct Hooks {
    std::function<v1::GossipEnvelope()> envelope;
    std::function<const CrdtReplica*(uint64_t round)> replica;
    std::function<PeerLinks::Link*(NodeId peer)> link_to;
    std::function<void(NodeId from, uint64_t round, const CrdtReplica* synced)> synced;
  };

  // How long a pull waits for a peer's answer to one question before it gives up on that pull.
  static constexpr std::chrono::seconds kAnswerTimeout{20};

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
  // A delta of a reply, decoded and checked (`model` holds the error otherwise). InvalidArgument
  // when it is bad or out of place (the pull then fails); Ok when it was used or nobody waits
  // for it any more.
  Status DeltaDecoded(NodeId from, const v1::GossipModel& header, Result<ModelState> model);
  // The questions waiting on `link` fail (it closed).
  void LinkClosed(PeerLinks::Link* link, const std::string& why);
  // The node leaves: queued pulls are dropped, every question fails, and answers still on their
  // way are read and dropped (not refused as unasked for).
  void Stop();
  bool in_flight() const { return in_flight_; }

 private:
  struct Pending {
    PeerLinks::Link* link;
    std::shared_ptr<std::promise<Result<CrdtAnswer>>> promise;
    CrdtAnswer answer;
    size_t deltas_left = 0;
    bool abandoned = false;  // failed already (the node is leaving): the answer is read and dropped
  };

  void Pump();
  void Ask(NodeId to, v1::CrdtRequest request, std::shared_ptr<std::promise<Result<CrdtAnswer>>> promise);
  void Fail(PeerLinks::Link* link, const std::string& why);  // null: every question
  void Resolve(std::map<uint64_t, Pending>::iterator it, Result<CrdtAnswer> answer);

  const NodeId self_;
  const size_t nodes_;
  PeerLinks* const links_;
  LoopWork* const work_;
  const AuthorKeys* const keys_;
  const Hooks hooks_;
  bool stopped_ = false;
  bool in_flight_ = false;
  std::deque<Actions::Sync> queue_;
  std::map<uint64_t, Pending> pending_;  // questions sent, by request id
  uint64_t next_request_ = 1;
};

}  // namespace plexus::gossip
