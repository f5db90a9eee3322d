// PeerNode's inside (peer_node.h), shared by the files that implement it by job: peer_node.cpp
// (the lifecycle, the protocol's actions, leaving, running), peer_node_messages.cpp (what the
// links deliver: hellos, status queries, models, and the membership they carry) and
// peer_node_local_work.cpp (training, evaluation, saving, the semi-decentralized server). The
// links (peer_links.h), model sends (model_sender.h) and CRDT pulls (crdt_pulls.h) are parts of
// their own. Not for other code. Loop thread only, as PeerNode.
#pragma once

#include <uv.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "crdt/signing.h"
#include "gossip/membership/membership_view.h"
#include "gossip/node/crdt_pulls.h"
#include "gossip/node/loop_work.h"
#include "gossip/node/model_sender.h"
#include "gossip/node/peer_links.h"
#include "gossip/node/peer_node.h"

namespace plexus::gossip {

struct PeerNode::Impl final : PeerLinks::Owner {
  using Link = PeerLinks::Link;

  // A node's life, in order; it only moves forward (Enter), in one place each: Joining ->
  // Running in MaybeStart, -> Lingering or Draining in Finish, Lingering -> Draining when the
  // linger timer fires or a stop is asked for (Tick), Draining -> Exiting in MaybeExit.
  enum class Phase {
    kJoining,    // dialling seeds and waiting for the others before its first round
    kRunning,    // the protocol runs
    kLingering,  // the last round is done: what is queued goes out, requests are answered
    kDraining,   // the linger is over (or a stop was asked for): it leaves once the links drain
    kExiting,    // every handle is closing; the loop ends
  };
  static const char* PhaseName(Phase p);
  PeerNodeOptions o;
  const ProtocolFactory* factory;
  ModelState initial;
  PeerTrainer* trainer;
  PeerStore* store;
  uv_loop_t loop;
  uv_timer_t tick;
  uv_timer_t linger;
  std::string address;  // what others dial

  Phase phase = Phase::kJoining;
  bool protocol_started = false;  // Start was called: it answers requests while the node lingers
  bool rejoining = false;         // continues from its --db: fetches a neighbour's model first
  int drain_waits = 0;
  static constexpr int kMaxDrainWaits = 60;
  // Work off the loop, one of each kind at a time; the node exits only once none is in flight.
  struct InFlight {
    bool training = false, evaluating = false, saving = false, exchanging = false;
    bool save_again = false;  // a round completed while saving: save again after
    bool any() const { return training || evaluating || saving || exchanging; }
  } in_flight;
  std::vector<std::string> dial_until_met;  // seeds and remembered members
  double next_dial_ms = 0, start_ms = 0, first_met_ms = -1;
  uint64_t max_round_seen = 0;
  // Messages that arrived before the protocol started, handed to it right after Start. A
  // neighbour that met every node first starts round 0 and sends its model before this node has
  // met the last one; dropped, that model cost this node a whole round's wait (wait_ms), and the
  // semi-decentralized server exchange that wait overlapped. At most MaxEarlyMessages() are kept.
  std::vector<std::pair<NodeId, Message>> early;
  const std::atomic<bool>* stop = nullptr;
  std::atomic<bool> killed{false};  // PeerNode::Kill
  std::function<void(const PeerNodeStats&)> on_progress;
  PeerNodeStats stats;   // bytes and refusals of the links are added by Stats()
  uint64_t refused = 0;  // what the node itself refused (rumours, models that failed their checks)
  std::shared_ptr<const ModelState> final_model;
  Status fatal = Status::Ok();
  std::string duplicate;      // another peer's hello claimed this peer's id: who, for the give-up error
  std::string wrong_address;  // a seed that answered in another protocol: ADDRESS: what it spoke
  // Mistakes that waiting cannot mend, so the node gives up at once: a peer this node dialed holds
  // its id, or every address it dials answered in another protocol.
  bool dialed_duplicate = false;
  std::set<std::string> foreign_seeds;
  std::unique_ptr<LoopWork> work;  // training, decoding, saves and pulls off the loop
  std::unique_ptr<PeerLinks> links;
  std::unique_ptr<ModelSender> sender;
  std::unique_ptr<CrdtPulls> pulls;
  std::unique_ptr<Membership> membership;
  std::optional<Topology> topology;  // the run's; the view filters it by who is live
  std::unique_ptr<MembershipView> view;
  std::unique_ptr<Protocol> protocol;
  struct ProtocolTimer {
    uv_timer_t handle;
    Impl* node;
    uint64_t id;
  };
  std::map<uint64_t, ProtocolTimer*> timers;       // the protocol's, running, by id
  std::map<NodeId, int> decoding;                  // models of each peer being decoded
  std::map<NodeId, MemberUpdate> deferred_leaves;  // goodbyes waiting for those models
  // Rumours (from other peers) that a peer left, while a link with that peer is open: they wait
  // for the link to close, so that they do not overtake the peer's last models on their way here.
  std::map<NodeId, MemberUpdate> rumoured_leaves;
  // CRDT gossip: this node's signing key and the keys of the peers it met (their hellos).
  SigningKey crdt_key;
  AuthorKeys author_keys;
  Impl(PeerNodeOptions options, const ProtocolFactory* f, ModelState init, PeerTrainer* t, PeerStore* s)
      : o(std::move(options)), factory(f), initial(std::move(init)), trainer(t), store(s) {}

  // ---- the lifecycle -------------------------------------------------------------------------

  void Enter(Phase next);
  bool running() const { return phase == Phase::kRunning; }
  bool finished() const { return phase >= Phase::kLingering; }
  PeerNodeStats Stats() const;

  // ---- what the links deliver ----------------------------------------------------------------

  v1::GossipEnvelope Envelope();
  v1::GossipEnvelope Hello() override;

  // The link to `peer`, dialling it when there is none. Null when its address is unknown.
  Link* LinkTo(NodeId peer);
  void OnEnvelope(Link* c, const v1::GossipEnvelope& e) override;
  // `plexus status --peer`: the answer, then the link closes.
  void SendStatus(Link* c);
  // False when the hello is refused (the link is closed then).
  bool AcceptHello(Link* c, const v1::GossipHello& h);
  // A model message's header: a request is delivered at once, a model is expected as a stream.
  void ModelAnnounced(Link* c, const v1::GossipModel& m);

  // Hash check and decoding on a worker thread (a codec's bytes decode into the node's own
  // layout); the model is checked there too, next to its decoding (the node's layout, every value
  // finite; free when the decoder saw every value as it arrived). The result comes back to the loop.
  void OnStream(Link* c, InboundStream in) override;
  // A decoded model message (a CRDT delta with the codec bytes it came in, null for float32).
  void Decoded(NodeId from, const v1::GossipModel& h, Result<ModelState> model,
               std::shared_ptr<const std::string> coded = nullptr);
  // To the protocol, or kept for it until it starts.
  void Deliver(NodeId from, const Message& m);

  // Two messages per other node: enough for every neighbour's first round and a request, and a
  // bound on the models one node holds before it starts.
  size_t MaxEarlyMessages() const { return 2 * static_cast<size_t>(o.nodes); }
  void OnClosed(Link* c, const std::string& why) override;
  void OnIdle() override { MaybeExit(); }

  // ---- membership ----------------------------------------------------------------------------

  double Now() { return static_cast<double>(uv_now(&loop)); }

  // A goodbye waits while models of that peer are still arriving or being decoded.
  void ApplyDeferredLeave(NodeId peer);
  void SendProbes(const std::vector<Membership::Probe>& probes);
  void Apply(const Membership::Changes& changes);
  void Tick();
  // Kill: cut every link at once, say nothing, and exit once the workers are done.
  void Die();

  // The protocol starts once the node knows every other node live, or start_wait_ms after it met
  // the first (a first node waits for others). A node that rejoins or is late starts at once.
  void MaybeStart();

  // ---- the protocol's actions ----------------------------------------------------------------

  void Handle(Actions a);
  void Send(NodeId to, Message m);

  // Setting a timer again restarts it: its id keeps one handle.
  void SetTimer(uint64_t id, double delay_ms);
  static void CloseTimer(ProtocolTimer* t);

  // ---- local work: training, evaluation, saving ------------------------------------------------

  void Train();

  // The node's own model on the trainer's held-out data, on a worker thread.
  void Evaluate();
  void Save();
  void Progress();

  // ---- semi-decentralized: the server ----------------------------------------------------------

  // The server's average comes back as the server node's reply, checked like any model; without
  // one (the server is down, a sampled peer is missing) the protocol's wait timer goes on alone.
  void ExchangeWithServer(Message m);

  // ---- leaving -------------------------------------------------------------------------------

  // The last round is done (or a stop was asked for): say goodbye, give the queued models
  // `linger_ms` to go out (none when stopping), then close everything.
  void Finish(double linger_ms, bool stopping);

  // The goodbye goes out on each peer's message link after every model already handed to the
  // links (models are queued on their links at once), so that it never overtakes the last model.
  void SendLeave();

  // After the linger, the queued models still go out (a peer waits for them), unless a link does
  // not drain within a minute.
  void MaybeExit();

  // ---- running -------------------------------------------------------------------------------

  Result<PeerNodeStats> Run();
  Result<uint64_t> LoadSaved(std::vector<MemberUpdate>* saved_members);
};

}  // namespace plexus::gossip
