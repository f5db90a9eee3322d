#include "gossip/node/peer_node.h"

#include <spdlog/spdlog.h>
#include <uv.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <optional>

#include "core/safetensors.h"
#include "gossip/node/member_wire.h"
#include "gossip/node/peer_node_impl.h"
#include "gossip/protocol/topology.h"

namespace plexus::gossip {
namespace {

constexpr double kTickMs = 100;

}  // namespace

const char* PeerNode::Impl::PhaseName(Phase p) {
  switch (p) {
    case Phase::kJoining:
      return "joining";
    case Phase::kRunning:
      return "running";
    case Phase::kLingering:
      return "lingering";
    case Phase::kDraining:
      return "draining";
    case Phase::kExiting:
      return "exiting";
  }
  return "?";
}

void PeerNode::Impl::Enter(Phase next) {
  if (next <= phase) return;
  spdlog::debug("peer {}: {} -> {}", o.self, PhaseName(phase), PhaseName(next));
  phase = next;
}

PeerNodeStats PeerNode::Impl::Stats() const {
  PeerNodeStats s = stats;
  s.bytes_sent = links ? links->counters().bytes_sent : 0;
  s.bytes_received = links ? links->counters().bytes_received : 0;
  s.frames_refused = refused + (links ? links->counters().refused : 0);
  s.members = membership ? membership->Snapshot() : std::vector<MemberUpdate>{};
  return s;
}

void PeerNode::Impl::Handle(Actions a) {
  for (Actions::Send& s : a.sends) Send(s.to, std::move(s.message));
  for (const Actions::Timer& t : a.timers) SetTimer(t.id, t.delay_ms);
  for (const Actions::Sync& s : a.syncs) {
    if (!finished()) pulls->Queue(s);
  }
  if (a.rounds_completed > 0) {
    stats.rounds_completed = protocol->rounds_completed();
    spdlog::info("round {}/{} done ({} live peers)", stats.rounds_completed, o.rounds,
                 membership->LiveMembers().size());
    Save();
    if (o.eval_every > 0 && (stats.rounds_completed % o.eval_every == 0)) Evaluate();
    Progress();
    if (stats.rounds_completed >= o.rounds) return Finish(o.linger_ms, /*stopping=*/false);
  }
  if (a.train && !finished()) Train();
}

void PeerNode::Impl::Send(NodeId to, Message m) {
  if (to == o.nodes && o.server && m.model) return ExchangeWithServer(std::move(m));
  if (to == o.self || to >= o.nodes) return;
  sender->Send(to, std::move(m));
}

void PeerNode::Impl::SetTimer(uint64_t id, double delay_ms) {
  ProtocolTimer*& t = timers[id];
  if (!t) {
    t = new ProtocolTimer{{}, this, id};
    uv_timer_init(&loop, &t->handle);
    t->handle.data = t;
  }
  uv_timer_start(
      &t->handle,
      [](uv_timer_t* h) {
        auto* t = static_cast<ProtocolTimer*>(h->data);
        Impl* n = t->node;
        const uint64_t id = t->id;
        n->timers.erase(id);
        CloseTimer(t);
        if (!n->running()) return;
        // A wait that ends on its timer is worth a line: the round went on without something.
        if (const std::string waited = n->protocol->WaitEndedBy(id); !waited.empty()) {
          spdlog::warn("stopped waiting for {}", waited);
        }
        n->Handle(n->protocol->OnTimer(id));
      },
      static_cast<uint64_t>(std::max(0.0, delay_ms)), 0);
}

void PeerNode::Impl::CloseTimer(ProtocolTimer* t) {
  uv_close(reinterpret_cast<uv_handle_t*>(&t->handle),
           [](uv_handle_t* h) { delete static_cast<ProtocolTimer*>(h->data); });
}

void PeerNode::Impl::Finish(double linger_ms, bool stopping) {
  if (finished()) return;
  const bool was_running = running();
  Enter(stopping ? Phase::kDraining : Phase::kLingering);
  final_model = protocol->model();
  pulls->Stop();
  if (in_flight.exchanging) o.server->Cancel();
  if (was_running) Handle(protocol->Leave());
  SendLeave();
  uv_timer_start(
      &linger,
      [](uv_timer_t* t) {
        auto* n = static_cast<Impl*>(t->data);
        // First the linger, then once a second until the links have drained (at most a minute).
        if (n->phase == Phase::kLingering) {
          n->Enter(Phase::kDraining);
        } else {
          ++n->drain_waits;
        }
        n->MaybeExit();
      },
      static_cast<uint64_t>(linger_ms), 1000);
  MaybeExit();
}

void PeerNode::Impl::SendLeave() {
  v1::GossipEnvelope bye = Envelope();
  *bye.mutable_leave() = ToProto(membership->Leave());
  for (const auto& [peer, c] : links->bound()) {
    if (c->hello_in && !c->closing) links->Send(c, bye);
  }
}

void PeerNode::Impl::MaybeExit() {
  if (phase != Phase::kDraining || in_flight.any() || pulls->in_flight()) return;
  if (!links->Drained() && drain_waits < kMaxDrainWaits) return;
  Enter(Phase::kExiting);
  links->CloseAll();
  for (auto& [id, t] : timers) CloseTimer(t);
  timers.clear();
  uv_close(reinterpret_cast<uv_handle_t*>(&tick), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&linger), nullptr);
}

// The round a --db says this node completed (0 without one), its model taken as the initial one.
Result<uint64_t> PeerNode::Impl::LoadSaved(std::vector<MemberUpdate>* saved_members) {
  if (!store) return uint64_t{0};
  PLEXUS_ASSIGN_OR_RETURN(std::optional<SavedPeer> saved, store->Load(o.self));
  if (!saved) return uint64_t{0};
  if (Status s = saved->model.CheckSameLayout(initial); !s.ok()) {
    return FailedPreconditionError("the model in the --db is not this run's model: " + s.message());
  }
  initial = std::move(saved->model);
  *saved_members = std::move(saved->members);
  rejoining = true;
  stats.resumed = true;
  spdlog::info("continuing from round {} saved in the database", saved->rounds);
  return saved->rounds;
}

Result<PeerNodeStats> PeerNode::Impl::Run() {
  std::vector<MemberUpdate> saved_members;
  PLEXUS_ASSIGN_OR_RETURN(const uint64_t start_round, LoadSaved(&saved_members));
  // An honest link's unfinished bytes stay below one model plus a chunk (its header may name a
  // longer version number than this node's initial one: 4 KiB of slack).
  const uint64_t own_bytes = SafetensorsPrefix(initial).size() + initial.num_bytes();
  const uint64_t one_model = own_bytes + o.chunk_bytes + 4096;
  if (o.inbound_budget < 2 * one_model) {
    return InvalidArgumentError("the inbound budget (" + std::to_string(o.inbound_budget >> 10) +
                                " KiB) must hold at least two of this run's models (" +
                                std::to_string((2 * one_model + 1023) >> 10) + " KiB)");
  }
  PLEXUS_ASSIGN_OR_RETURN(sockaddr_storage listen_addr, ResolvePeerAddress(o.listen));
  // A peer that closes its end while this node writes must cost that link only: without this, the
  // write raises SIGPIPE, which ends the process.
  signal(SIGPIPE, SIG_IGN);
  const std::string topo_spec = o.topology.empty() ? factory->default_topology() : o.topology;
  PLEXUS_ASSIGN_OR_RETURN(topology, Topology::Parse(topo_spec, o.nodes, o.seed));

  PLEXUS_ASSIGN_OR_RETURN(crdt_key, SigningKey::Generate());
  author_keys.Add("peer-" + std::to_string(o.self), crdt_key.public_key());
  uv_loop_init(&loop);
  work = std::make_unique<LoopWork>(&loop);
  links = std::make_unique<PeerLinks>(&loop,
                                      PeerLinksOptions{o.max_frame_bytes, o.chunk_bytes, o.write_high_water,
                                                       o.inbound_budget, o.inbound_stall_ms, o.tls},
                                      this);
  Result<std::string> bound = links->Listen(listen_addr);
  if (!bound.ok()) {
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    return UnavailableError("cannot listen on " + o.listen + ": " + bound.status().message());
  }
  address = o.advertise.empty() ? *bound : o.advertise;
  auto envelope = [this] { return Envelope(); };
  auto link_to = [this](NodeId peer) { return LinkTo(peer); };
  sender = std::make_unique<ModelSender>(links.get(), o.codec, ModelSender::Hooks{link_to, envelope});
  pulls = std::make_unique<CrdtPulls>(
      o.self, o.nodes, links.get(), work.get(), &author_keys,
      CrdtPulls::Hooks{envelope, [this](uint64_t round) { return protocol->replica(round); }, link_to,
                       [this](NodeId from, uint64_t round, const CrdtReplica* synced) {
                         if (running()) Handle(protocol->OnSynced(from, round, synced));
                         MaybeExit();
                       },
                       [this] { return Now(); }});

  // A restarted node's incarnation must beat the one it died with: the wall clock does.
  const auto incarnation = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  membership = std::make_unique<Membership>(o.self, address, incarnation, o.membership, o.seed);
  view = std::make_unique<MembershipView>(&*topology, membership.get());
  NodeContext ctx;
  ctx.self = o.self;
  ctx.peers = view.get();
  ctx.seed = o.seed;
  ctx.total_rounds = o.rounds;
  ctx.nodes = o.nodes;
  ctx.server = static_cast<NodeId>(o.nodes);
  ctx.start_round = start_round;
  ctx.signing_key = &crdt_key;
  ctx.author_keys = &author_keys;
  protocol = factory->MakeNode(ctx, std::make_shared<const ModelState>(initial));
  links->SetStreamLimits(std::min<uint64_t>(o.max_model_bytes, 2 * own_bytes + (1 << 20)),
                         std::max<uint64_t>(one_model, o.inbound_budget / 4));
  stats.rounds_completed = start_round;
  spdlog::info("peer {} of {} listening on {} ({}{})", o.self, o.nodes, address, factory->description(),
               o.tls ? ", mutual TLS" : ", plaintext");

  uv_timer_init(&loop, &tick);
  tick.data = this;
  uv_timer_init(&loop, &linger);
  linger.data = this;
  uv_timer_start(
      &tick, [](uv_timer_t* t) { static_cast<Impl*>(t->data)->Tick(); }, 0, static_cast<uint64_t>(kTickMs));
  if (start_round >= o.rounds) {
    spdlog::info("the database says all {} rounds are done", o.rounds);
    Finish(0, /*stopping=*/false);
  }
  // Seeds, and the members a restarted node remembers, dialled from the first tick on.
  for (const std::string& s : o.seeds) {
    if (s != address) dial_until_met.push_back(s);
  }
  for (const MemberUpdate& u : saved_members) {
    if (u.state != MemberState::kLeft && u.node < o.nodes && u.node != o.self) dial_until_met.push_back(u.address);
  }
  start_ms = Now();
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  if (!final_model) final_model = protocol->model();
  PLEXUS_RETURN_IF_ERROR(fatal);
  return Stats();
}

PeerNode::PeerNode(PeerNodeOptions options, const ProtocolFactory* factory, ModelState initial, PeerTrainer* trainer,
                   PeerStore* store)
    : impl_(std::make_unique<Impl>(std::move(options), factory, std::move(initial), trainer, store)) {}

PeerNode::~PeerNode() = default;

void PeerNode::Kill() { impl_->killed.store(true); }

void PeerNode::Impl::Die() {
  spdlog::info("peer {} killed: every link cut, no goodbye", o.self);
  Enter(Phase::kDraining);
  pulls->Stop();
  if (in_flight.exchanging) o.server->Cancel();
  links->CloseAll();
  MaybeExit();
}

Result<PeerNodeStats> PeerNode::Run(const std::atomic<bool>* stop,
                                    std::function<void(const PeerNodeStats&)> on_progress) {
  impl_->stop = stop;
  impl_->on_progress = std::move(on_progress);
  return impl_->Run();
}

std::shared_ptr<const ModelState> PeerNode::model() const {
  if (impl_->final_model) return impl_->final_model;
  return impl_->protocol ? impl_->protocol->model() : nullptr;
}

}  // namespace plexus::gossip
