#include <spdlog/spdlog.h>

#include <algorithm>

#include "compression/codec.h"
#include "gossip/node/member_wire.h"
#include "gossip/node/peer_node_impl.h"

namespace plexus::gossip {

v1::GossipEnvelope PeerNode::Impl::Envelope() {
  v1::GossipEnvelope e;
  for (const MemberUpdate& u : membership->Piggyback()) *e.add_members() = ToProto(u);
  return e;
}

v1::GossipEnvelope PeerNode::Impl::Hello() {
  v1::GossipEnvelope hello = Envelope();
  auto* h = hello.mutable_hello();
  h->set_node(o.self);
  h->set_address(address);
  h->set_incarnation(membership->incarnation());
  h->set_nodes(static_cast<uint32_t>(o.nodes));
  h->set_run(o.run);
  h->set_round(protocol ? protocol->rounds_completed() : 0);
  h->set_crdt_key(crdt_key.public_key());
  h->set_wire_version(kGossipWireVersion);
  return hello;
}

PeerNode::Impl::Link* PeerNode::Impl::LinkTo(NodeId peer) {
  if (phase == Phase::kExiting) return nullptr;
  if (Link* c = links->Find(peer)) return c;
  const std::string& addr = membership->address_of(peer);
  return addr.empty() ? nullptr : links->Dial(addr, peer);
}

void PeerNode::Impl::OnEnvelope(Link* c, const v1::GossipEnvelope& e) {
  if (!c->hello_in && e.has_status_request()) return SendStatus(c);
  if (!c->hello_in) {
    if (!e.has_hello()) return links->Refuse(c, "a message before the hello");
    if (!AcceptHello(c, e.hello())) return;
  }
  const double now = Now();
  Membership::Changes changes;
  for (const v1::GossipMember& m : e.members()) {
    if (m.node() < o.nodes && m.node() != c->peer && m.node() != o.self && FromProto(m).state == MemberState::kLeft &&
        (decoding[m.node()] > 0 || links->IsLinked(m.node()))) {
      // Another peer heard the goodbye first; the leaver's last models may still be on their way
      // here on its own link. The rumour waits for that link to close (ApplyDeferredLeave).
      auto [it, fresh] = rumoured_leaves.try_emplace(m.node(), FromProto(m));
      if (!fresh && it->second.incarnation < m.incarnation()) it->second = FromProto(m);
      continue;
    }
    if (m.node() < o.nodes && !membership->Apply(FromProto(m), now, &changes)) {
      ++refused;
      spdlog::warn("refused a membership rumour from peer {} about peer {}: incarnation {} is absurd", c->peer,
                   m.node(), m.incarnation());
    }
  }
  std::vector<Membership::Probe> probes;
  switch (e.body_case()) {
    case v1::GossipEnvelope::kPing:
      if (e.ping().target() < o.nodes) membership->OnPing(c->peer, e.ping().target(), e.ping().seq(), now, &probes);
      break;
    case v1::GossipEnvelope::kAck:
      membership->OnAck(c->peer, e.ack().target(), e.ack().seq(), now, &probes, &changes);
      break;
    case v1::GossipEnvelope::kLeave:
      if (e.leave().node() != c->peer) break;
      // Models the peer sent before its goodbye are still being decoded: the goodbye waits for
      // them, so that its last model is merged rather than given up on.
      if (decoding[c->peer] > 0 || !c->inbound.empty()) {
        deferred_leaves[c->peer] = FromProto(e.leave());
        break;
      }
      membership->Apply(FromProto(e.leave()), now, &changes);
      break;
    case v1::GossipEnvelope::kModel:
      ModelAnnounced(c, e.model());
      break;
    case v1::GossipEnvelope::kCrdtRequest:
      pulls->Answer(c, protocol ? protocol->replica(e.crdt_request().round()) : nullptr, e.crdt_request());
      break;
    case v1::GossipEnvelope::kCrdtReply:
      if (Status s = pulls->ReplyArrived(c, e.crdt_reply()); !s.ok()) return links->Refuse(c, s.message());
      break;
    default:
      break;
  }
  SendProbes(probes);
  Apply(changes);
}

void PeerNode::Impl::SendStatus(Link* c) {
  const PeerNodeStats now = Stats();
  v1::GossipEnvelope e;
  v1::GossipStatus* st = e.mutable_status();
  st->set_node(o.self);
  st->set_nodes(static_cast<uint32_t>(o.nodes));
  st->set_run(o.run);
  st->set_rounds_completed(protocol->rounds_completed());
  st->set_rounds(o.rounds);
  if (now.accuracy) {
    st->set_has_accuracy(true);
    st->set_accuracy(*now.accuracy);
    st->set_accuracy_round(now.accuracy_round);
  }
  for (const MemberUpdate& u : now.members) *st->add_members() = ToProto(u);
  st->set_bytes_sent(now.bytes_sent);
  st->set_bytes_received(now.bytes_received);
  st->set_frames_refused(now.frames_refused);
  c->close_when_drained = true;
  links->Send(c, e);
}

bool PeerNode::Impl::AcceptHello(Link* c, const v1::GossipHello& h) {
  if (h.wire_version() != kGossipWireVersion) {
    links->Refuse(c, "hello from node " + std::to_string(h.node()) + " in gossip wire version " +
                         std::to_string(h.wire_version()) +
                         (h.wire_version() == 0 ? " (a plexus from before versions)" : "") + ", this node speaks " +
                         std::to_string(kGossipWireVersion) + ": run the same plexus release on every peer");
    return false;
  }
  if (h.nodes() != o.nodes || h.node() >= o.nodes) {
    links->Refuse(c, "hello from node " + std::to_string(h.node()) + " of a " + std::to_string(h.nodes()) +
                         "-node federation (this one has " + std::to_string(o.nodes) + ")");
    return false;
  }
  const std::string id = std::to_string(h.node());
  if (h.node() == o.self) {
    // Its own hello come back (a seed that is its own address) is closed quietly; another process
    // claiming this peer's id is refused with its address, on both sides.
    if (h.address() == address) {
      links->Close(c, "a link to itself");
      return false;
    }
    duplicate = "the peer at " + h.address() + " claims --partition-index " + id + ", this peer's own";
    if (!c->dialed.empty()) dialed_duplicate = true;
    links->Refuse(c, duplicate + ": two peers were started with the same --partition-index");
    return false;
  }
  // A second live peer with the id of one this node is linked to, from another address. (A
  // restarted peer's old link has closed by the time its new one says hello.)
  if (Link* known = links->Find(h.node()); known != nullptr && known != c && known->hello_in && !known->closing &&
                                           membership->address_of(h.node()) != h.address()) {
    links->Refuse(c, "the peer at " + h.address() + " claims --partition-index " + id + ", which the peer at " +
                         membership->address_of(h.node()) + " has: two peers were started with the same index");
    return false;
  }
  if (h.run() != o.run) {
    links->Refuse(c, "peer " + std::to_string(h.node()) + " runs '" + h.run() + "', this node '" + o.run + "'");
    return false;
  }
  if (c->tls && c->tls->peer_name() != "peer-" + std::to_string(h.node())) {
    links->Refuse(c, "certificate '" + c->tls->peer_name() + "' claims to be peer " + std::to_string(h.node()));
    return false;
  }
  if (c->peer != kNoPeer && c->peer != h.node()) {
    links->Refuse(c, "dialled peer " + std::to_string(c->peer) + ", answered by " + std::to_string(h.node()));
    return false;
  }
  links->Bind(c, h.node());
  // The key signs the peer's CRDT contributions; with TLS the link vouches that it is the peer's.
  if (h.crdt_key().size() == 32) author_keys.Add("peer-" + std::to_string(h.node()), h.crdt_key());
  stats.peers_seen.insert(h.node());
  max_round_seen = std::max(max_round_seen, h.round());
  Membership::Changes changes;
  membership->Apply({h.node(), h.address(), h.incarnation(), MemberState::kAlive}, Now(), &changes);
  // A newcomer learns the whole membership from whoever it meets.
  v1::GossipEnvelope snapshot;
  for (const MemberUpdate& u : membership->Snapshot()) *snapshot.add_members() = ToProto(u);
  links->Send(c, snapshot);
  Apply(changes);
  return !c->closing;
}

void PeerNode::Impl::ModelAnnounced(Link* c, const v1::GossipModel& m) {
  if ((m.kind() < v1::GossipModel::MODEL || m.kind() > v1::GossipModel::MODEL_REPLY) &&
      m.kind() != v1::GossipModel::OUTER_STATE) {
    return links->Refuse(c, "unknown model message kind");
  }
  if (m.total_bytes() == 0) {
    if (m.kind() != v1::GossipModel::MODEL_REQUEST) return links->Refuse(c, "a model message without a model");
    return Deliver(c->peer, Message{Message::Kind::kModelRequest, m.round(), nullptr, m.weight(), m.degree()});
  }
  if (!m.codec().empty() && m.codec() != o.codec) {
    return links->Refuse(c, "a model in codec '" + m.codec() + "', where this run's is '" + o.codec + "'");
  }
  if (Status s = links->Expect(c, m, !m.codec().empty()); !s.ok()) links->Refuse(c, s.message());
}

void PeerNode::Impl::OnStream(Link* c, InboundStream in) {
  const NodeId from = c->peer;
  ++decoding[from];
  auto job = std::make_shared<InboundStream>(std::move(in));
  auto model = std::make_shared<Result<ModelState>>(InvalidArgumentError("not decoded"));
  std::shared_ptr<const ModelState> own = protocol->model();
  std::string codec = o.codec;
  // A contribution's delta has its round's layout (streaming DiLoCo's: one fragment of the model),
  // and travels in the protocol's contribution codec, if any.
  if (job->header.kind() == v1::GossipModel::CRDT_DELTA) {
    if (std::shared_ptr<const ModelState> layout = protocol->contribution_layout(job->header.round())) own = layout;
    codec = protocol->contribution_codec();
  }
  auto coded = std::make_shared<std::shared_ptr<const std::string>>();  // a contribution's bytes, kept to relay
  work->OffLoop(
      [job, model, own, codec, coded] {
        if (!job->assembler.bytes_stream()) {
          *model = std::move(job->assembler).Finish();
        } else if (job->header.codec() != codec) {
          *model =
              InvalidArgumentError("a contribution in codec '" + job->header.codec() + "', where this run's travel " +
                                   (codec.empty() ? std::string("as float32") : "in '" + codec + "'"));
        } else if (Result<std::string> bytes = std::move(job->assembler).FinishBytes(); !bytes.ok()) {
          *model = bytes.status();
        } else {
          Result<std::unique_ptr<Codec>> decoder = MakeCodec(codec);
          *model = decoder.ok() ? (*decoder)->Decode(*bytes, *own) : decoder.status();
          if (job->header.kind() == v1::GossipModel::CRDT_DELTA) {
            *coded = std::make_shared<const std::string>(std::move(bytes).value());
          }
        }
        if (!model->ok()) return;
        Status check = (*model)->CheckSameLayout(*own);
        if (check.ok()) check = (*model)->CheckFinite();
        if (!check.ok()) *model = check;
      },
      [this, from, job, model, coded] {
        links->Release(job->received);
        Decoded(from, job->header, std::move(*model), std::move(*coded));
        --decoding[from];
        ApplyDeferredLeave(from);
      });
}

void PeerNode::Impl::Decoded(NodeId from, const v1::GossipModel& h, Result<ModelState> model,
                             std::shared_ptr<const std::string> coded) {
  if (h.kind() == v1::GossipModel::CRDT_DELTA) {
    if (Status s = pulls->DeltaDecoded(from, h, std::move(model), std::move(coded)); !s.ok()) {
      ++refused;
      spdlog::warn("refused a contribution from peer {}: {}", from, s.message());
    }
    return;
  }
  if (finished() && h.kind() != v1::GossipModel::MODEL_REQUEST) return;
  if (!model.ok()) {  // decoded and checked on the worker
    ++refused;
    spdlog::warn("refused a model from peer {}: {}", from, model.status().message());
    return;
  }
  ++stats.models_received;
  Message m{static_cast<Message::Kind>(h.kind()), h.round(),
            std::make_shared<const ModelState>(std::move(model).value()), h.weight(), h.degree()};
  Deliver(from, m);
}

void PeerNode::Impl::Deliver(NodeId from, const Message& m) {
  if (protocol_started) return Handle(protocol->OnMessage(from, m));
  if (finished()) return;
  if (early.size() >= MaxEarlyMessages()) {
    spdlog::warn("dropped a message from peer {} (round {}): {} already wait for this peer to start", from, m.round,
                 early.size());
    return;
  }
  spdlog::info("keeping a message from peer {} (round {}) until this peer starts", from, m.round);
  early.emplace_back(from, m);
}

void PeerNode::Impl::OnClosed(Link* c, const std::string& why) {
  // A seed that turned out to be something else than a peer: the give-up error says what.
  if (phase == Phase::kJoining && !c->dialed.empty() && NamesForeignProtocol(why)) {
    wrong_address = c->dialed + ": " + why;
    foreign_seeds.insert(c->dialed);
  }
  pulls->LinkClosed(c, why);
  if (c->peer != kNoPeer && phase != Phase::kExiting) ApplyDeferredLeave(c->peer);
}

void PeerNode::Impl::ApplyDeferredLeave(NodeId peer) {
  if (decoding[peer] > 0 || links->HasUnfinishedStream(peer)) return;
  Membership::Changes changes;
  if (auto it = deferred_leaves.find(peer); it != deferred_leaves.end()) {
    const MemberUpdate leave = it->second;
    deferred_leaves.erase(it);
    membership->Apply(leave, Now(), &changes);
  }
  if (auto it = rumoured_leaves.find(peer); it != rumoured_leaves.end() && !links->IsLinked(peer)) {
    const MemberUpdate leave = it->second;
    rumoured_leaves.erase(it);
    if (!membership->Apply(leave, Now(), &changes)) ++refused;  // an absurd incarnation, as on arrival
  }
  Apply(changes);
}

void PeerNode::Impl::SendProbes(const std::vector<Membership::Probe>& probes) {
  for (const Membership::Probe& p : probes) {
    Link* c = LinkTo(p.to);
    if (!c) continue;
    v1::GossipEnvelope e = Envelope();
    if (p.kind == Membership::Probe::Kind::kAck) {
      e.mutable_ack()->set_seq(p.seq);
      e.mutable_ack()->set_target(p.target);
    } else {
      e.mutable_ping()->set_seq(p.seq);
      e.mutable_ping()->set_target(p.target);
    }
    links->Send(c, e);
  }
}

void PeerNode::Impl::Apply(const Membership::Changes& changes) {
  for (NodeId n : changes.left) {
    spdlog::info("peer {} is {}", n, MemberStateName(membership->members().at(n).state));
    if (running()) Handle(protocol->OnPeerLeft(n));
  }
  for (NodeId n : changes.joined) {
    spdlog::info("peer {} joined", n);
    if (running()) Handle(protocol->OnPeerJoined(n));
  }
  if (!changes.left.empty() || !changes.joined.empty()) Progress();
  MaybeStart();
}

void PeerNode::Impl::Tick() {
  if (killed.load()) {
    if (phase < Phase::kDraining) return Die();
    return MaybeExit();  // when the workers' last job is done
  }
  if (stop && stop->load()) {
    if (!finished()) {
      spdlog::info("stopping on signal after {} rounds", protocol->rounds_completed());
      return Finish(0, /*stopping=*/true);
    }
    // A signal while the node lingers after its last round ends the linger: what is queued
    // still goes out (MaybeExit waits for the links to drain), nothing more is waited for.
    if (phase == Phase::kLingering) {
      spdlog::info("stopping on signal: the linger ends");
      Enter(Phase::kDraining);
      return MaybeExit();
    }
  }
  const double now = Now();
  const bool every_seed_foreign = !foreign_seeds.empty() && membership->LiveMembers().empty() &&
                                  std::all_of(dial_until_met.begin(), dial_until_met.end(),
                                              [&](const std::string& a) { return foreign_seeds.count(a) > 0; });
  if (phase == Phase::kJoining && (dialed_duplicate || every_seed_foreign)) {
    fatal = UnavailableError(dialed_duplicate ? duplicate + ": start each peer with its own --partition-index"
                                              : wrong_address);
    return Finish(0, /*stopping=*/false);
  }
  if (phase == Phase::kJoining && now >= next_dial_ms) {
    if (now - start_ms >= o.give_up_ms) {
      fatal = UnavailableError(
          !duplicate.empty() ? duplicate + ": start each peer with its own --partition-index"
          : !wrong_address.empty()
              ? "no peer answered in " + std::to_string(static_cast<int64_t>(o.give_up_ms / 1000)) + " s; " +
                    wrong_address
              : "no peer answered in " + std::to_string(static_cast<int64_t>(o.give_up_ms / 1000)) +
                    " s: are the --peers running and reachable, with the same --num-partitions, algorithm and model?");
      return Finish(0, /*stopping=*/false);
    }
    next_dial_ms = now + 1000;
    for (const std::string& a : dial_until_met) links->Dial(a);
  }
  links->CloseStalledStreams(now);
  pulls->Tick();
  std::vector<Membership::Probe> probes;
  Membership::Changes changes;
  membership->Tick(now, &probes, &changes);
  SendProbes(probes);
  Apply(changes);
}

void PeerNode::Impl::MaybeStart() {
  if (phase != Phase::kJoining || membership->LiveMembers().empty()) return;
  const double now = Now();
  if (first_met_ms < 0) first_met_ms = now;
  const bool everyone = membership->LiveMembers().size() + 1 >= o.nodes;
  const bool late = max_round_seen > protocol->rounds_completed();
  if (!everyone && !rejoining && !late && now - first_met_ms < o.start_wait_ms) return;
  Enter(Phase::kRunning);
  protocol_started = true;
  spdlog::info("peer {} starts{}", o.self, rejoining || late ? ", fetching a neighbour's model first" : "");
  stats.fetched_at_start = rejoining || late;
  Handle(protocol->Start(rejoining || late));
  std::vector<std::pair<NodeId, Message>> kept;
  kept.swap(early);
  for (auto& [from, m] : kept) {
    if (finished()) break;
    ++stats.messages_before_start;
    Handle(protocol->OnMessage(from, m));
  }
}

}  // namespace plexus::gossip
