// gossip::Protocol: one node of a decentralized federation as a pure state machine. It takes what
// happens to the node (local training finished, a message arrived, a timer fired, a peer left or
// joined) and answers with what to do (messages to send, timers to set, whether to train), and
// does nothing itself: no sockets, no threads, no clock, no LibTorch. The simulator drives these
// objects on its event network (simulations/gossip_sim.h); a networked node drives the very same
// ones, so what is measured in simulation is what runs on the wire.
//
// Which peers a node may talk to, and which are live, comes from a PeerView the driver owns (the
// topology filtered by membership). Randomness comes from an Rng the node is given.
// A Protocol is single-threaded: its driver calls it from one thread, one call at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/model_state.h"
#include "core/rng.h"

namespace plexus {
class AuthorKeys;
class CrdtReplica;
class SigningKey;
}  // namespace plexus

namespace plexus::gossip {

using NodeId = uint32_t;

// What travels between two nodes. The model is shared: one model sent to several peers is one
// copy in memory (a wire codec serializes it per link).
struct Message {
  enum class Kind : uint8_t {
    kModel,         // a round's model (D-PSGD, Epidemic Learning)
    kPushSum,       // push-sum: the running totals of numerator and weight sent on this link
    kModelRequest,  // a (re)joining node asks for a model to start from
    kModelReply,    // the answer: the sender's model and round
    // DiLoCo gossip: the outer momentum (model layout, float32), sent just before a kModelReply
    // so that a rejoining node steps exactly as its peers do. (4 is the wire's CRDT delta.)
    kOuterState = 5,
  };
  Kind kind = Kind::kModel;
  uint64_t round = 0;
  std::shared_ptr<const ModelState> model;  // null for a request
  double weight = 0.0;                      // push-sum: the running total of weight on this link
  uint32_t degree = 0;                      // the sender's live degree (Metropolis-Hastings weights)
  // Compressed gossip (CHOCO): the model travels encoded in this many bytes; 0: as float32.
  uint64_t encoded_bytes = 0;
  // ... and these are the bytes, of codec `codec` (compression/codec.h), which a networked driver
  // sends instead of the model (the receiver decodes them); null: the model travels as float32.
  std::shared_ptr<const std::string> encoded{};
  std::string codec{};

  // Bytes on the wire: the model's values (or their encoding) plus a fixed header.
  uint64_t bytes() const {
    return kHeaderBytes + (encoded_bytes > 0 ? encoded_bytes : (model ? model->num_bytes() : 0));
  }
  static constexpr uint64_t kHeaderBytes = 64;
};

// What a node asks its driver to do after one input.
struct Actions {
  struct Send {
    NodeId to;
    Message message;
  };
  struct Timer {
    uint64_t id;
    double delay_ms;
  };
  // CRDT gossip: pull what `from`'s replica of `round` holds and this node's lacks (Merkle-digest
  // anti-entropy through a crdt::SyncPeer the driver provides), answered with OnSynced.
  struct Sync {
    NodeId from;
    uint64_t round;
  };
  std::vector<Send> sends;
  std::vector<Timer> timers;
  std::vector<Sync> syncs;
  bool train = false;             // start local training on model(); answer with OnTrained
  uint32_t rounds_completed = 0;  // rounds this input completed

  void Append(Actions&& other);
};

// The node's view of the federation: its neighbours at a round (the topology, live peers only)
// and the live peers. Owned by the driver, which keeps it current as peers leave and join.
class PeerView {
 public:
  virtual ~PeerView() = default;
  // Live peers this node sends to at `round`, and live peers it receives from. Replaces `out`.
  virtual void OutNeighbours(NodeId self, uint64_t round, std::vector<NodeId>* out) const = 0;
  virtual void InNeighbours(NodeId self, uint64_t round, std::vector<NodeId>* out) const = 0;
  // Up to `k` distinct live out-neighbours of `self` at `round`, drawn with `rng`.
  virtual void SampleOutNeighbours(NodeId self, uint64_t round, size_t k, Rng& rng, std::vector<NodeId>* out) const;
  // True when the links run both ways (Metropolis-Hastings weights apply).
  virtual bool undirected() const = 0;
  virtual bool IsLive(NodeId node) const = 0;
};

// What every protocol is built with.
struct NodeContext {
  NodeId self = 0;
  const PeerView* peers = nullptr;  // borrowed; outlives the node
  uint64_t seed = 0;                // the node's random stream: Rng::Derive(seed, self)
  uint64_t total_rounds = 0;        // the run's length, for schedules such as BALANCE's
  size_t nodes = 0;                 // how many nodes the federation has (ids 0 .. nodes - 1)
  NodeId server = 0;                // semi-decentralized only: the server's id (= nodes)
  uint64_t start_round = 0;         // rounds already completed (a node restarted from its saved state)
  // CRDT gossip only (crdt.cpp): the --merge text, resolved as an aggregators strategy (set by
  // ProtocolFactory::MakeNode); the node's signing key and the authors' keys, borrowed from the
  // driver, which learns peers' keys as it meets them.
  std::string merge_spec = "mean";
  const SigningKey* signing_key = nullptr;
  const AuthorKeys* author_keys = nullptr;
};

class Protocol {
 public:
  virtual ~Protocol() = default;

  // The node starts. `rejoining`: it was in the federation before (or joins late) and first
  // fetches a live neighbour's model; otherwise it starts from its own model.
  virtual Actions Start(bool rejoining) = 0;
  // Local training on model() finished with `trained` (same layout).
  virtual Actions OnTrained(ModelState trained) = 0;
  virtual Actions OnMessage(NodeId from, const Message& message) = 0;
  virtual Actions OnTimer(uint64_t timer) = 0;
  // What the node stops waiting for if `timer` fires now, for the log ("round 3: the models of
  // peers 2, 5"); empty when the timer would end no wait.
  virtual std::string WaitEndedBy(uint64_t /*timer*/) { return ""; }
  // Membership changed: `peer` left or (re)joined.
  virtual Actions OnPeerLeft(NodeId peer) = 0;
  virtual Actions OnPeerJoined(NodeId /*peer*/) { return {}; }
  // The node leaves gracefully: what it sends on the way out (push-sum hands over its mass).
  // Inputs after Leave are ignored until Start(true).
  virtual Actions Leave() = 0;

  // CRDT gossip: this node's replica of `round`'s contributions (null when it holds none), which
  // the driver answers peers' sync requests from and copies to sync into; and the copy after a
  // pull from `from` (null: the pull failed), to join.
  virtual const CrdtReplica* replica(uint64_t /*round*/) const { return nullptr; }
  virtual Actions OnSynced(NodeId /*from*/, uint64_t /*round*/, const CrdtReplica* /*synced*/) { return {}; }
  // CRDT gossip: the layout every contribution of `round` has (streaming DiLoCo's are one
  // fragment of the model), which a driver checks a fetched delta against before anything is
  // joined; null for the model's own layout.
  virtual std::shared_ptr<const ModelState> contribution_layout(uint64_t /*round*/) const { return nullptr; }
  // The codec spec contributions travel in (compression/codec.h), or empty: float32 models.
  // A fetched delta in any other codec is refused.
  virtual std::string contribution_codec() const { return ""; }

  // The node's current model: what it trains from next and what is evaluated as its own.
  virtual std::shared_ptr<const ModelState> model() const = 0;
  // Rounds this node has completed.
  virtual uint64_t rounds_completed() const = 0;
};

}  // namespace plexus::gossip
