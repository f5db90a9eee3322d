// PeerNode: one node of a decentralized federation on the network (`plexus peer`), driving a
// gossip::Protocol (gossip/protocol/) over TCP with libuv. One event loop owns the sockets, the
// timers and the membership (SWIM, membership.h); local training and model (de)serialization run
// on libuv's worker threads and post their results back, so heartbeats never wait on training: a
// peer that trains for minutes is slow, not dead.
//
// Links: length-prefixed frames (frame.h) carrying plexus.v1.GossipEnvelope messages and model
// chunks; with TLS (tls_channel.h) every byte goes through a mutually authenticated TLS 1.3
// session, and a peer's certificate must name it `peer-<id>` for the id it claims. Backpressure:
// a link produces its next chunk only while fewer than `write_high_water` bytes wait in the
// socket, control messages (hello, pings, acks) go before model chunks, and a node stops reading
// while more than `inbound_budget` bytes of models are being received or decoded. Reading never
// waits on the node's own writes, so two peers sending each other large models do not deadlock.
//
// Everything a peer sends is checked before it is used: frame and model sizes before allocation,
// the model's SHA-256, its tensor layout against the node's own and every value finite. What
// fails is refused and counted (frames_refused); a malformed frame or failed handshake closes
// that link only.
// Run() is called once, from one thread; the loop runs on that thread. It sets SIGPIPE to be
// ignored for the process (a closed link must not end it).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/model_state.h"
#include "core/status.h"
#include "gossip/membership/membership.h"
#include "gossip/node/peer_address.h"
#include "gossip/node/peer_store.h"
#include "gossip/node/tls_channel.h"
#include "gossip/protocol/registry.h"

namespace plexus::gossip {

// Semi-decentralized federations: how a peer reaches the server the protocol sends to (node id
// `nodes`), a real `plexus server` here. Exchange gives the server this node's model of `round`
// and returns the server's average it becomes part of; it blocks (the node runs it on a worker
// thread). Cancel, from any thread, ends an Exchange in progress early.
class ServerLink {
 public:
  virtual ~ServerLink() = default;
  virtual Result<ModelState> Exchange(const ModelState& model, uint64_t round) = 0;
  virtual void Cancel() = 0;
};

struct PeerNodeOptions {
  NodeId self = 0;
  size_t nodes = 0;                    // ids 0 .. nodes - 1
  std::string listen = "127.0.0.1:0";  // HOST:PORT (numeric, or localhost)
  std::string advertise;               // the address others dial; empty: the listening address
  std::vector<std::string> seeds;      // HOST:PORT of peers to join through
  uint64_t rounds = 10;
  uint64_t seed = 0;
  std::string topology;  // empty: the algorithm's own
  std::string run;       // names the run (algorithm, model, ...): peers of another run are refused
  MembershipOptions membership;
  uint32_t max_frame_bytes = (1u << 20) + 4096;
  // A model stream may announce at most min(max_model_bytes, 2 x this node's own encoded model
  // + 1 MiB): every peer of a run sends that run's layout.
  uint64_t max_model_bytes = 1ull << 30;
  size_t chunk_bytes = 256 << 10;
  size_t write_high_water = 4 << 20;
  // One link's unfinished models may hold max(inbound_budget / 4, one model and a chunk) bytes; a
  // link past that is refused, so one sender cannot fill the budget and pause everyone's reading.
  // Run() refuses a budget that cannot hold two models.
  uint64_t inbound_budget = 256ull << 20;
  // A model stream announced on a link that delivers no chunk for this long (reading not paused
  // by this node) is refused and its link closed: what it received is given back to the budget.
  double inbound_stall_ms = 30000;
  std::shared_ptr<const TlsContext> tls;  // null: plaintext
  // After the last round: how long the node stays to deliver what it queued and answer
  // requests before it leaves.
  double linger_ms = 2000;
  // Until the node meets its first peer it dials the seeds (and the members it remembers) again
  // every second; after this long alone it gives up (Unavailable).
  double give_up_ms = 300000;
  // Before its first round the node waits until it knows every other node, or this long after it
  // met its first peer: peers started a moment apart then begin together instead of racing ahead
  // in small groups (lock-step protocols would pay for that with wait timers round after round).
  double start_wait_ms = 10000;
  // Compressed gossip (choco): the codec (compression/codec.h name) the protocol's changes travel
  // in; a stream in any other codec is refused. Empty: models travel as float32 safetensors only.
  std::string codec;
  // Semi-decentralized algorithms: the server (borrowed; outlives the node). Null: none, and an
  // algorithm that needs one cannot run.
  ServerLink* server = nullptr;
  // Every this many rounds the node evaluates its own model (PeerTrainer::Evaluate) for its
  // progress log and `plexus status --peer`; 0: never.
  uint64_t eval_every = 5;
};

// Local training: runs on a worker thread, one call at a time. An error leaves the round's model
// unchanged (logged); Aborted (diverged) likewise.
class PeerTrainer {
 public:
  virtual ~PeerTrainer() = default;
  virtual Result<ModelState> Train(const ModelState& start, uint64_t round) = 0;
  // The model's accuracy on held-out data. May run on another worker thread while Train runs
  // (one Evaluate at a time).
  virtual Result<double> Evaluate(const ModelState& model) = 0;
};

struct PeerNodeStats {
  uint64_t rounds_completed = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t frames_refused = 0;  // malformed frames, bad hashes, wrong layouts, NaN, failed handshakes
  uint64_t models_received = 0;
  uint64_t server_exchanges = 0;       // semi-decentralized: averages received from the server
  uint64_t messages_before_start = 0;  // arrived before this node's protocol started; kept for it
  bool resumed = false;                // continued from the state in its --db
  bool fetched_at_start = false;       // began late or rejoined: took a neighbour's model first
  std::optional<double> accuracy;      // the last evaluation (eval_every), after accuracy_round rounds
  uint64_t accuracy_round = 0;
  std::set<NodeId> peers_seen;        // every peer that completed a hello with this node
  std::vector<MemberUpdate> members;  // the membership as this node sees it
};

class PeerNode {
 public:
  // `factory`, `trainer` and `store` (null: nothing saved) are borrowed and outlive the node.
  // With a store holding this node's state, the node continues from it.
  PeerNode(PeerNodeOptions options, const ProtocolFactory* factory, ModelState initial, PeerTrainer* trainer,
           PeerStore* store);
  ~PeerNode();

  // Runs until the node has completed options.rounds rounds and left, or `stop` turns true (it
  // then leaves at once). `on_progress` is called on the loop thread after every round and
  // membership change. Unavailable when the address cannot be bound; FailedPrecondition for a
  // --db of another node.
  Result<PeerNodeStats> Run(const std::atomic<bool>* stop, std::function<void(const PeerNodeStats&)> on_progress = {});
  // The node's model (after Run: the final one).
  std::shared_ptr<const ModelState> model() const;
  // Ends the node as a killed process ends: at its next tick every link and the listener are cut,
  // with no goodbye to the others and nothing saved after; Run returns once the work already on
  // the workers has finished. For tests that need a crash inside one process (the others must
  // find it by SWIM, as they would a dead machine). Any thread; before or during Run.
  void Kill();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace plexus::gossip
