#include "gossip/node/peer_node.h"

#include <spdlog/spdlog.h>
#include <uv.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <optional>

#include "compression/codec.h"
#include "core/safetensors.h"
#include "crdt/signing.h"
#include "gossip/node/crdt_sync.h"
#include "gossip/node/frame.h"
#include "gossip/node/loop_work.h"
#include "gossip/node/member_wire.h"
#include "gossip/node/membership_view.h"
#include "gossip/node/model_streams.h"
#include "gossip/node/peer_address.h"
#include "gossip/protocol/topology.h"
#include "plexus/v1/gossip.pb.h"

namespace plexus::gossip {
namespace {

constexpr NodeId kNoPeer = ~NodeId{0};
constexpr size_t kReadBufferBytes = 1 << 20;  // loopback reads deliver up to ~1 MiB at once
constexpr size_t kMaxInboundStreams = 64;     // models announced and not yet complete, per link
constexpr double kTickMs = 100;
// How long a pull waits for a peer's answer to one CRDT question before it gives up on that pull.
constexpr std::chrono::seconds kCrdtAnswerTimeout{20};

double NowMs(uv_loop_t* loop) { return static_cast<double>(uv_now(loop)); }

}  // namespace

struct PeerNode::Impl {
  struct Connection;
  struct Connection {
    uv_tcp_t tcp;
    Impl* node = nullptr;
    bool initiator = false;
    bool connected = false;  // TCP up
    bool closing = false;
    bool paused = false;              // reading stopped: the inbound budget is full
    bool hello_in = false;            // the peer's hello arrived and was accepted
    bool close_when_drained = false;  // a status query: close once the answer is out
    NodeId peer = kNoPeer;
    std::unique_ptr<TlsChannel> tls;
    FrameReader reader;
    std::deque<std::string> control;     // small frames, sent before chunks
    std::deque<OutboundStream> streams;  // models, chunk by chunk
    size_t writing = 0;                  // bytes handed to uv_write, not yet written
    uint32_t next_stream = 1;
    std::map<uint32_t, InboundStream> inbound;
    uint64_t unfinished_bytes = 0;  // received of the streams in `inbound` (capped by link_cap)
    explicit Connection(uint32_t max_frame) : reader(max_frame) {}
    bool ready() const { return connected && (!tls || tls->established()); }
  };
  struct WriteRequest {
    uv_write_t req;
    Connection* conn;
    std::string bytes;
  };
  struct PendingSend {
    NodeId to;
    Message message;
  };

  PeerNodeOptions o;
  const ProtocolFactory* factory;
  ModelState initial;
  PeerTrainer* trainer;
  PeerStore* store;

  uv_loop_t loop;
  uv_tcp_t server;
  uv_timer_t tick;
  uv_timer_t linger;
  bool linger_started = false;
  std::string read_buffer = std::string(kReadBufferBytes, '\0');
  std::string address;  // what others dial

  std::unique_ptr<Membership> membership;
  std::unique_ptr<MembershipView> view;
  std::unique_ptr<Protocol> protocol;
  bool started = false, finished = false, stopping = false, training = false;
  bool rejoining = false;
  bool linger_ms_over = false, exiting = false, eval_in_flight = false, leave_pending = false;
  int drain_waits = 0;
  static constexpr int kMaxDrainWaits = 60;
  std::vector<std::string> dial_until_met;  // seeds and remembered members
  double next_dial_ms = 0, start_ms = 0, first_met_ms = -1;
  uint64_t max_round_seen = 0;
  // Messages that arrived before the protocol started, handed to it right after Start. A
  // neighbour that met every node first starts round 0 and sends its model before this node has
  // met the last one; dropped, that model cost this node a whole round's wait (wait_ms), and the
  // semi-decentralized server exchange that wait overlapped. At most MaxEarlyMessages() are kept.
  std::vector<std::pair<NodeId, Message>> early;
  const std::atomic<bool>* stop = nullptr;
  std::function<void(const PeerNodeStats&)> on_progress;
  PeerNodeStats stats;
  std::shared_ptr<const ModelState> final_model;

  std::set<Connection*> connections;
  std::map<NodeId, Connection*> links;  // the link each peer's messages go out on
  std::map<uint64_t, uv_timer_t*> timers;
  std::vector<EncodedModel> encoded;                               // recent encodings, reused per target
  std::map<const ModelState*, std::vector<PendingSend>> encoding;  // encodings in flight
  uint64_t inbound_bytes = 0;
  // Every model a peer of this run sends has this run's layout: a stream may announce at most
  // twice this node's own encoded model (and 1 MiB for the header), not max_model_bytes. Bytes
  // of a link's unfinished streams are capped at link_cap: an honest link fills one stream at a
  // time (its chunks go out stream after stream), so only a link that drips into many streams
  // at once reaches it, and it cannot hold the budget (and every other link's reading) alone.
  uint64_t stream_limit = 0, link_cap = 0;
  std::vector<NodeId> paused_peers;
  std::map<NodeId, int> decoding;                  // models of each peer being decoded
  std::map<NodeId, MemberUpdate> deferred_leaves;  // goodbyes waiting for those models
  bool save_in_flight = false, save_again = false;
  Status fatal = Status::Ok();

  // CRDT gossip: this node's signing key, the keys of the peers it met (their hellos), and the
  // pulls from peers' replicas, run one at a time on a worker thread whose questions come to the
  // loop through LoopWork::Post.
  SigningKey crdt_key;
  AuthorKeys author_keys;
  struct CrdtPending {
    Connection* conn;
    std::shared_ptr<std::promise<Result<CrdtAnswer>>> promise;
    CrdtAnswer answer;
    size_t deltas_left = 0;
    bool abandoned = false;  // failed already (the node is leaving): the answer is read and dropped
  };
  std::map<uint64_t, CrdtPending> crdt_pending;  // requests sent, by id
  uint64_t next_crdt_request = 1;
  std::deque<Actions::Sync> sync_queue;
  bool sync_in_flight = false;
  bool exchange_in_flight = false;  // semi-decentralized: an exchange with the server
  std::unique_ptr<LoopWork> work;   // training, decoding, saves and pulls off the loop

  Impl(PeerNodeOptions options, const ProtocolFactory* f, ModelState init, PeerTrainer* t, PeerStore* s)
      : o(std::move(options)), factory(f), initial(std::move(init)), trainer(t), store(s) {}

  // ---- writing -------------------------------------------------------------------------------

  void WriteRaw(Connection* c, std::string bytes) {
    if (bytes.empty() || c->closing) return;
    stats.bytes_sent += bytes.size();
    auto* w = new WriteRequest{{}, c, std::move(bytes)};
    w->req.data = w;
    c->writing += w->bytes.size();
    uv_buf_t buf = uv_buf_init(w->bytes.data(), static_cast<unsigned>(w->bytes.size()));
    const int rc = uv_write(&w->req, reinterpret_cast<uv_stream_t*>(&c->tcp), &buf, 1, [](uv_write_t* req, int status) {
      auto* w = static_cast<WriteRequest*>(req->data);
      Connection* c = w->conn;
      c->writing -= w->bytes.size();
      delete w;
      if (status < 0) return c->node->Close(c, "write failed");
      c->node->Pump(c);
    });
    if (rc < 0) {
      c->writing -= w->bytes.size();
      delete w;
      Close(c, "write failed");
    }
  }

  void WriteFrame(Connection* c, const std::string& frame) {
    if (!c->tls) return WriteRaw(c, frame);
    std::string cipher;
    Status s = c->tls->Write(frame, &cipher);
    WriteRaw(c, std::move(cipher));
    if (!s.ok()) Close(c, s.message());
  }

  // Sends what the link may send now: control frames first, then model chunks, while fewer than
  // write_high_water bytes wait in the socket.
  void Pump(Connection* c) {
    if (c->closing || !c->ready()) return;
    while (!c->closing && c->writing < o.write_high_water) {
      if (!c->control.empty()) {
        std::string f = std::move(c->control.front());
        c->control.pop_front();
        WriteFrame(c, f);
        continue;
      }
      if (c->streams.empty()) break;
      OutboundStream& s = c->streams.front();
      const size_t n = std::min(o.chunk_bytes, s.size() - s.offset);
      std::string frame = EncodeFrameHeader(FrameType::kChunk, s.id, s.index++, n);
      frame.reserve(frame.size() + n);
      s.CopyTo(n, &frame);
      WriteFrame(c, frame);
      s.offset += n;
      if (s.offset == s.size()) c->streams.pop_front();
    }
    if (c->close_when_drained && c->control.empty() && c->writing == 0) return Close(c, "status sent");
    MaybeExit();
  }

  v1::GossipEnvelope Envelope() {
    v1::GossipEnvelope e;
    for (const MemberUpdate& u : membership->Piggyback()) *e.add_members() = ToProto(u);
    return e;
  }

  void SendEnvelope(Connection* c, const v1::GossipEnvelope& e) {
    c->control.push_back(EncodeFrame(FrameType::kMessage, 0, 0, e.SerializeAsString()));
    Pump(c);
  }

  // The link to `peer`, dialling it when there is none. Null when its address is unknown.
  Connection* LinkTo(NodeId peer) {
    if (exiting) return nullptr;
    if (auto it = links.find(peer); it != links.end()) return it->second;
    const std::string& addr = membership->address_of(peer);
    if (addr.empty()) return nullptr;
    Connection* c = Dial(addr);
    if (c) links[peer] = c;
    if (c) c->peer = peer;
    return c;
  }

  // ---- connections ---------------------------------------------------------------------------

  Connection* NewConnection(bool initiator) {
    auto* c = new Connection(o.max_frame_bytes);
    c->node = this;
    c->initiator = initiator;
    uv_tcp_init(&loop, &c->tcp);
    c->tcp.data = c;
    if (o.tls) c->tls = std::make_unique<TlsChannel>(*o.tls, initiator);
    connections.insert(c);
    // The hello goes first on every link.
    v1::GossipEnvelope hello = Envelope();
    auto* h = hello.mutable_hello();
    h->set_node(o.self);
    h->set_address(address);
    h->set_incarnation(membership->incarnation());
    h->set_nodes(static_cast<uint32_t>(o.nodes));
    h->set_run(o.run);
    h->set_round(protocol ? protocol->rounds_completed() : 0);
    h->set_crdt_key(crdt_key.public_key());
    c->control.push_back(EncodeFrame(FrameType::kMessage, 0, 0, hello.SerializeAsString()));
    return c;
  }

  Connection* Dial(const std::string& addr) {
    auto ss = ResolvePeerAddress(addr);
    if (!ss.ok()) return nullptr;
    Connection* c = NewConnection(true);
    auto* req = new uv_connect_t;
    req->data = c;
    const int rc =
        uv_tcp_connect(req, &c->tcp, reinterpret_cast<const sockaddr*>(&ss.value()), [](uv_connect_t* req, int status) {
          auto* c = static_cast<Connection*>(req->data);
          delete req;
          if (status < 0) return c->node->Close(c, std::string("connect: ") + uv_strerror(status));
          c->node->Connected(c);
        });
    if (rc < 0) {
      delete req;
      Close(c, "connect failed");
      return nullptr;
    }
    return c;
  }

  void Connected(Connection* c) {
    if (c->closing) return;
    c->connected = true;
    uv_tcp_nodelay(&c->tcp, 1);
    StartReading(c);
    if (c->tls) {
      std::string out;
      Status s = c->tls->Start(&out);
      WriteRaw(c, std::move(out));
      if (!s.ok()) return Refuse(c, s.message());
    }
    Pump(c);
  }

  void StartReading(Connection* c) {
    uv_read_start(
        reinterpret_cast<uv_stream_t*>(&c->tcp),
        [](uv_handle_t* h, size_t, uv_buf_t* buf) {
          auto* c = static_cast<Connection*>(h->data);
          *buf = uv_buf_init(c->node->read_buffer.data(), static_cast<unsigned>(c->node->read_buffer.size()));
        },
        [](uv_stream_t* s, ssize_t n, const uv_buf_t* buf) {
          auto* c = static_cast<Connection*>(s->data);
          // A link that ends during the TLS handshake is closed, not counted as refused: the other
          // end may have dropped a duplicate link or died, and a certificate it refused arrives as
          // an alert, which the handshake reports (and Received refuses) before the end of stream.
          if (n < 0 && c->tls && !c->tls->established()) {
            spdlog::info("a link{} ended during the TLS handshake",
                         c->peer != kNoPeer ? " to peer " + std::to_string(c->peer) : std::string());
            return c->node->Close(c, "ended during the TLS handshake");
          }
          if (n < 0) return c->node->Close(c, n == UV_EOF ? "closed by the peer" : uv_strerror(static_cast<int>(n)));
          if (n > 0) c->node->Received(c, std::string_view(buf->base, static_cast<size_t>(n)));
        });
  }

  void Close(Connection* c, const std::string& why) {
    if (c->closing) return;
    c->closing = true;
    if (c->peer != kNoPeer) spdlog::debug("link to peer {} closed: {}", c->peer, why);
    if (auto it = links.find(c->peer); it != links.end() && it->second == c) links.erase(it);
    for (auto& [id, in] : c->inbound) inbound_bytes -= std::min<uint64_t>(inbound_bytes, in.received);
    c->inbound.clear();
    c->unfinished_bytes = 0;
    FailCrdtRequests(c, "the link closed: " + why);
    connections.erase(c);
    if (c->peer != kNoPeer && !exiting) ApplyDeferredLeave(c->peer);
    uv_close(reinterpret_cast<uv_handle_t*>(&c->tcp), [](uv_handle_t* h) { delete static_cast<Connection*>(h->data); });
    // Its bytes left the budget: links paused for them read again (they once stayed paused).
    if (!exiting) ResumeReading();
    MaybeExit();
  }

  void Refuse(Connection* c, const std::string& why) {
    ++stats.frames_refused;
    spdlog::warn("refused {} (peer {}): {}", c->peer == kNoPeer ? "a link" : "a frame",
                 c->peer == kNoPeer ? -1 : static_cast<int64_t>(c->peer), why);
    Close(c, why);
  }

  // ---- reading -------------------------------------------------------------------------------

  void Received(Connection* c, std::string_view bytes) {
    stats.bytes_received += bytes.size();
    std::string plain;
    std::string_view data = bytes;
    if (c->tls) {
      const bool was = c->tls->established();
      std::string out;
      Status s = c->tls->Feed(bytes, &plain, &out);
      WriteRaw(c, std::move(out));
      if (!s.ok()) return Refuse(c, s.message());
      if (!was && c->tls->established()) Pump(c);
      data = plain;
    }
    if (data.empty()) return;
    Status s = c->reader.Read(data, [&](const FrameView& f) {
      HandleFrame(c, f);
      return !c->closing;
    });
    if (!s.ok() && !c->closing) return Refuse(c, s.message());
    if (!c->closing && !c->paused && inbound_bytes > o.inbound_budget) {
      c->paused = true;
      uv_read_stop(reinterpret_cast<uv_stream_t*>(&c->tcp));
      paused_peers.push_back(c->peer);
    }
  }

  void ResumeReading() {
    if (inbound_bytes > o.inbound_budget) return;
    const double now = NowMs(&loop);
    for (Connection* c : connections) {
      if (c->paused && !c->closing) {
        c->paused = false;
        for (auto& [id, in] : c->inbound) in.last_progress_ms = now;  // the pause was this node's doing
        StartReading(c);
      }
    }
    paused_peers.clear();
  }

  void HandleFrame(Connection* c, const FrameView& f) {
    if (f.type == FrameType::kChunk) return HandleChunk(c, f);
    v1::GossipEnvelope e;
    if (!e.ParseFromArray(f.payload.data(), static_cast<int>(f.payload.size()))) {
      return Refuse(c, "malformed message");
    }
    if (!c->hello_in && e.has_status_request()) return SendStatus(c);
    if (!c->hello_in) {
      if (!e.has_hello()) return Refuse(c, "a message before the hello");
      if (!AcceptHello(c, e.hello())) return;
    }
    const double now = NowMs(&loop);
    Membership::Changes changes;
    for (const v1::GossipMember& m : e.members()) {
      if (m.node() < o.nodes && !membership->Apply(FromProto(m), now, &changes)) {
        ++stats.frames_refused;
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
        HandleModelHeader(c, e.model());
        break;
      case v1::GossipEnvelope::kCrdtRequest:
        AnswerCrdt(c, e.crdt_request());
        break;
      case v1::GossipEnvelope::kCrdtReply:
        CrdtReplyArrived(c, e.crdt_reply());
        break;
      default:
        break;
    }
    SendProbes(probes);
    Apply(changes);
  }

  void SendStatus(Connection* c) {
    v1::GossipEnvelope e;
    v1::GossipStatus* st = e.mutable_status();
    st->set_node(o.self);
    st->set_nodes(static_cast<uint32_t>(o.nodes));
    st->set_run(o.run);
    st->set_rounds_completed(protocol->rounds_completed());
    st->set_rounds(o.rounds);
    if (stats.accuracy) {
      st->set_has_accuracy(true);
      st->set_accuracy(*stats.accuracy);
      st->set_accuracy_round(stats.accuracy_round);
    }
    for (const MemberUpdate& u : membership->Snapshot()) *st->add_members() = ToProto(u);
    st->set_bytes_sent(stats.bytes_sent);
    st->set_bytes_received(stats.bytes_received);
    st->set_frames_refused(stats.frames_refused);
    c->close_when_drained = true;
    SendEnvelope(c, e);
  }

  bool AcceptHello(Connection* c, const v1::GossipHello& h) {
    if (h.nodes() != o.nodes || h.node() >= o.nodes) {
      Refuse(c, "hello from node " + std::to_string(h.node()) + " of a " + std::to_string(h.nodes()) +
                    "-node federation (this one has " + std::to_string(o.nodes) + ")");
      return false;
    }
    if (h.node() == o.self) {
      Close(c, "a link to itself");
      return false;
    }
    if (h.run() != o.run) {
      Refuse(c, "peer " + std::to_string(h.node()) + " runs '" + h.run() + "', this node '" + o.run + "'");
      return false;
    }
    if (c->tls && c->tls->peer_name() != "peer-" + std::to_string(h.node())) {
      Refuse(c, "certificate '" + c->tls->peer_name() + "' claims to be peer " + std::to_string(h.node()));
      return false;
    }
    if (c->peer != kNoPeer && c->peer != h.node()) {
      Refuse(c, "dialled peer " + std::to_string(c->peer) + ", answered by " + std::to_string(h.node()));
      return false;
    }
    c->hello_in = true;
    c->peer = h.node();
    // The key signs the peer's CRDT contributions; with TLS the link vouches that it is the peer's.
    if (h.crdt_key().size() == 32) author_keys.Add("peer-" + std::to_string(h.node()), h.crdt_key());
    stats.peers_seen.insert(h.node());
    links.try_emplace(h.node(), c);
    max_round_seen = std::max(max_round_seen, h.round());
    Membership::Changes changes;
    membership->Apply({h.node(), h.address(), h.incarnation(), MemberState::kAlive}, NowMs(&loop), &changes);
    // A newcomer learns the whole membership from whoever it meets.
    v1::GossipEnvelope snapshot;
    for (const MemberUpdate& u : membership->Snapshot()) *snapshot.add_members() = ToProto(u);
    SendEnvelope(c, snapshot);
    Apply(changes);
    return !c->closing;
  }

  void HandleModelHeader(Connection* c, const v1::GossipModel& m) {
    if (m.kind() < v1::GossipModel::MODEL || m.kind() > v1::GossipModel::MODEL_REPLY) {
      return Refuse(c, "unknown model message kind");
    }
    if (m.total_bytes() == 0) {
      if (m.kind() != v1::GossipModel::MODEL_REQUEST) return Refuse(c, "a model message without a model");
      return Deliver(c->peer, Message{Message::Kind::kModelRequest, m.round(), nullptr, m.weight(), m.degree()});
    }
    if (c->inbound.size() >= kMaxInboundStreams || c->inbound.count(m.stream())) {
      return Refuse(c, "too many model streams at once, or a stream id reused");
    }
    if (!m.codec().empty() && m.codec() != o.codec) {
      return Refuse(c, "a model in codec '" + m.codec() + "', where this run's is '" + o.codec + "'");
    }
    auto assembler = m.codec().empty() ? ModelAssembler::Begin(m.total_bytes(), m.sha256(), stream_limit)
                                       : ModelAssembler::BeginBytes(m.total_bytes(), m.sha256(), stream_limit);
    if (!assembler.ok()) return Refuse(c, assembler.status().message());
    c->inbound.emplace(m.stream(), InboundStream{m, std::move(assembler).value(), 0, NowMs(&loop)});
  }

  void HandleChunk(Connection* c, const FrameView& f) {
    auto it = c->inbound.find(f.stream);
    if (it == c->inbound.end()) return Refuse(c, "a chunk of an unannounced model stream");
    if (Status s = it->second.assembler.Add(f.index, f.payload); !s.ok()) return Refuse(c, s.message());
    it->second.received += f.payload.size();
    it->second.last_progress_ms = NowMs(&loop);
    inbound_bytes += f.payload.size();
    c->unfinished_bytes += f.payload.size();
    if (it->second.assembler.complete()) {
      InboundStream in = std::move(it->second);
      c->inbound.erase(it);
      c->unfinished_bytes -= in.received;
      return Decode(c->peer, std::move(in));
    }
    if (c->unfinished_bytes > link_cap) {
      Refuse(c, std::to_string(c->unfinished_bytes) + " bytes of unfinished models on one link, over its share of " +
                    std::to_string(link_cap));
    }
  }

  // Hash check and safetensors decoding on a worker thread; the result comes back to the loop.
  void Decode(NodeId from, InboundStream in) {
    ++decoding[from];
    auto job = std::make_shared<InboundStream>(std::move(in));
    auto model = std::make_shared<Result<ModelState>>(InvalidArgumentError("not decoded"));
    // A codec's bytes decode into the node's own layout (checked against the codec's length).
    // The model is checked there too, next to its decoding (the node's layout, every value
    // finite); the finiteness pass is free when the decoder saw every value as it arrived.
    std::shared_ptr<const ModelState> own = protocol->model();
    work->OffLoop(
        [job, model, own, codec = o.codec] {
          if (!job->assembler.bytes_stream()) {
            *model = std::move(job->assembler).Finish();
          } else if (Result<std::string> bytes = std::move(job->assembler).FinishBytes(); !bytes.ok()) {
            *model = bytes.status();
          } else {
            Result<std::unique_ptr<Codec>> decoder = MakeCodec(codec);
            *model = decoder.ok() ? (*decoder)->Decode(*bytes, *own) : decoder.status();
          }
          if (!model->ok()) return;
          Status check = (*model)->CheckSameLayout(*own);
          if (check.ok()) check = (*model)->CheckFinite();
          if (!check.ok()) *model = check;
        },
        [this, from, job, model] {
          inbound_bytes -= std::min<uint64_t>(inbound_bytes, job->received);
          ResumeReading();
          Decoded(from, job->header, std::move(*model));
          --decoding[from];
          ApplyDeferredLeave(from);
        });
  }

  void Decoded(NodeId from, const v1::GossipModel& h, Result<ModelState> model) {
    if (h.kind() == v1::GossipModel::CRDT_DELTA) return CrdtDeltaDecoded(from, h, std::move(model));
    if (finished && h.kind() != v1::GossipModel::MODEL_REQUEST) return;
    if (!model.ok()) {  // decoded and checked on the worker
      ++stats.frames_refused;
      spdlog::warn("refused a model from peer {}: {}", from, model.status().message());
      return;
    }
    ++stats.models_received;
    Message m{static_cast<Message::Kind>(h.kind()), h.round(),
              std::make_shared<const ModelState>(std::move(model).value()), h.weight(), h.degree()};
    Deliver(from, m);
  }

  void Deliver(NodeId from, const Message& m) {
    if (!started) {
      if (finished) return;
      if (early.size() >= MaxEarlyMessages()) {
        spdlog::warn("dropped a message from peer {} (round {}): {} already wait for this peer to start", from, m.round,
                     early.size());
        return;
      }
      spdlog::info("keeping a message from peer {} (round {}) until this peer starts", from, m.round);
      early.emplace_back(from, m);
      return;
    }
    Handle(protocol->OnMessage(from, m));
  }

  // Two messages per other node: enough for every neighbour's first round and a request, and a
  // bound on the models one node holds before it starts.
  size_t MaxEarlyMessages() const { return 2 * static_cast<size_t>(o.nodes); }

  // ---- membership ----------------------------------------------------------------------------

  // A goodbye waits while models of that peer are still arriving or being decoded.
  void ApplyDeferredLeave(NodeId peer) {
    auto it = deferred_leaves.find(peer);
    if (it == deferred_leaves.end() || decoding[peer] > 0) return;
    for (Connection* c : connections) {
      if (c->peer == peer && !c->inbound.empty()) return;
    }
    const MemberUpdate leave = it->second;
    deferred_leaves.erase(it);
    Membership::Changes changes;
    membership->Apply(leave, NowMs(&loop), &changes);
    Apply(changes);
  }

  void SendProbes(const std::vector<Membership::Probe>& probes) {
    for (const Membership::Probe& p : probes) {
      Connection* c = LinkTo(p.to);
      if (!c) continue;
      v1::GossipEnvelope e = Envelope();
      if (p.kind == Membership::Probe::Kind::kAck) {
        e.mutable_ack()->set_seq(p.seq);
        e.mutable_ack()->set_target(p.target);
      } else {
        e.mutable_ping()->set_seq(p.seq);
        e.mutable_ping()->set_target(p.target);
      }
      SendEnvelope(c, e);
    }
  }

  void Apply(const Membership::Changes& changes) {
    for (NodeId n : changes.left) {
      spdlog::info("peer {} is {}", n, MemberStateName(membership->members().at(n).state));
      if (started && !finished) Handle(protocol->OnPeerLeft(n));
    }
    for (NodeId n : changes.joined) {
      spdlog::info("peer {} joined", n);
      if (started && !finished) Handle(protocol->OnPeerJoined(n));
    }
    if (!changes.left.empty() || !changes.joined.empty()) Progress();
    MaybeStart();
  }

  // Links whose announced models stopped arriving are refused: a sender cannot hold bytes of
  // the budget (and so every link's reading) longer than inbound_stall_ms. Paused links count
  // too, from their last resume: a sender whose partial model filled the budget pauses its own
  // link as well, and must not be kept by that.
  void CloseStalledStreams(double now) {
    std::vector<std::pair<Connection*, uint64_t>> stalled;
    for (Connection* c : connections) {
      if (c->closing) continue;
      for (const auto& [id, in] : c->inbound) {
        if (now - in.last_progress_ms >= o.inbound_stall_ms) {
          stalled.emplace_back(c, id);
          break;
        }
      }
    }
    for (auto [c, id] : stalled) {
      Refuse(c, "model stream " + std::to_string(id) + " delivered nothing for " +
                    std::to_string(static_cast<int64_t>(o.inbound_stall_ms / 1000)) + " s");
    }
  }

  void Tick() {
    if (!finished && stop && stop->load()) {
      spdlog::info("stopping on signal after {} rounds", protocol->rounds_completed());
      stopping = true;
      return Finish(0);
    }
    // A signal while the node lingers after its last round ends the linger: what is queued still
    // goes out (MaybeExit waits for the links to drain), nothing more is waited for.
    if (finished && !stopping && stop && stop->load()) {
      spdlog::info("stopping on signal: the linger ends");
      stopping = true;
      return MaybeExit();
    }
    const double now = NowMs(&loop);
    if (!started && !finished && now >= next_dial_ms) {
      if (now - start_ms >= o.give_up_ms) {
        fatal = UnavailableError("no peer answered in " + std::to_string(static_cast<int64_t>(o.give_up_ms / 1000)) +
                                 " s: are the --peers running and reachable, with the same --num-partitions, "
                                 "algorithm and model?");
        return Finish(0);
      }
      next_dial_ms = now + 1000;
      for (const std::string& a : dial_until_met) Dial(a);
    }
    CloseStalledStreams(now);
    std::vector<Membership::Probe> probes;
    Membership::Changes changes;
    membership->Tick(now, &probes, &changes);
    SendProbes(probes);
    Apply(changes);
  }

  // The protocol starts once the node knows every other node live, or start_wait_ms after it met
  // the first (a first node waits for others). A node that rejoins or is late starts at once.
  void MaybeStart() {
    if (started || finished || membership->LiveMembers().empty()) return;
    const double now = NowMs(&loop);
    if (first_met_ms < 0) first_met_ms = now;
    const bool everyone = membership->LiveMembers().size() + 1 >= o.nodes;
    const bool behind = rejoining || max_round_seen > protocol->rounds_completed();
    if (!everyone && !behind && now - first_met_ms < o.start_wait_ms) return;
    started = true;
    const bool late = max_round_seen > protocol->rounds_completed();
    spdlog::info("peer {} starts{}", o.self, rejoining || late ? ", fetching a neighbour's model first" : "");
    Handle(protocol->Start(rejoining || late));
    std::vector<std::pair<NodeId, Message>> kept;
    kept.swap(early);
    for (auto& [from, m] : kept) {
      if (finished) break;
      ++stats.messages_before_start;
      Handle(protocol->OnMessage(from, m));
    }
  }

  // ---- the protocol's actions ----------------------------------------------------------------

  void Handle(Actions a) {
    for (Actions::Send& s : a.sends) Send(s.to, std::move(s.message));
    for (const Actions::Timer& t : a.timers) SetTimer(t.id, t.delay_ms);
    for (const Actions::Sync& s : a.syncs) QueueSync(s);
    if (a.rounds_completed > 0) {
      stats.rounds_completed = protocol->rounds_completed();
      spdlog::info("round {}/{} done ({} live peers)", stats.rounds_completed, o.rounds,
                   membership->LiveMembers().size());
      Save();
      if (o.eval_every > 0 && (stats.rounds_completed % o.eval_every == 0)) Evaluate();
      Progress();
      if (stats.rounds_completed >= o.rounds) return Finish(o.linger_ms);
    }
    if (a.train && !finished) Train();
  }

  void Send(NodeId to, Message m) {
    if (to == o.nodes && o.server && m.model) return ExchangeWithServer(std::move(m));
    if (to == o.self || to >= o.nodes) return;
    if (!m.model) return SendModelMessage(to, m, nullptr, "");  // a request
    if (m.encoded && !o.codec.empty() && m.codec == o.codec) return SendModelMessage(to, m, nullptr, "");
    m.encoded = nullptr;  // the model itself travels
    for (const EncodedModel& e : encoded) {
      if (e.model.lock() == m.model) return SendModelMessage(to, m, e.prefix, e.sha);
    }
    auto [it, first] = encoding.try_emplace(m.model.get());
    it->second.push_back({to, std::move(m)});
    if (first) Encode(it->second.front().message.model);
  }

  // A model message to `to`: its header, and the model as a stream of safetensors (the model's
  // values behind `prefix`) or, for compressed gossip, of the codec's bytes (small: hashed here).
  void SendModelMessage(NodeId to, const Message& m, std::shared_ptr<const std::string> prefix,
                        const std::string& sha) {
    Connection* c = LinkTo(to);
    if (!c) return;
    v1::GossipEnvelope e = Envelope();
    v1::GossipModel* h = e.mutable_model();
    h->set_kind(static_cast<v1::GossipModel::Kind>(m.kind));
    h->set_round(m.round);
    h->set_weight(m.weight);
    h->set_degree(m.degree);
    if (m.model) {
      OutboundStream stream{m.model, std::move(prefix), c->next_stream++};
      if (m.encoded) {
        stream.coded = m.encoded;
        h->set_codec(m.codec);
      }
      h->set_stream(stream.id);
      h->set_total_bytes(stream.size());
      h->set_sha256(m.encoded ? Sha256Hex(*m.encoded) : sha);
      c->streams.push_back(std::move(stream));
    }
    SendEnvelope(c, e);
  }

  void Encode(std::shared_ptr<const ModelState> model) {
    auto encoded_model = std::make_shared<EncodedModel>();
    work->OffLoop(
        [model, encoded_model] {
          encoded_model->prefix = std::make_shared<std::string>(SafetensorsPrefix(*model));
          const std::string_view values(reinterpret_cast<const char*>(model->data().data()), model->num_bytes());
          encoded_model->sha = Sha256Hex({*encoded_model->prefix, values});
        },
        [this, model, encoded_model] {
          encoded_model->model = model;
          auto it = encoding.find(model.get());
          if (it == encoding.end()) return;
          std::vector<PendingSend> sends = std::move(it->second);
          encoding.erase(it);
          std::erase_if(encoded, [](const EncodedModel& e) { return e.model.expired(); });
          if (encoded.size() >= 4) encoded.erase(encoded.begin());
          encoded.push_back(*encoded_model);
          for (const PendingSend& s : sends)
            SendModelMessage(s.to, s.message, encoded_model->prefix, encoded_model->sha);
          SendLeaveWhenReady();
          MaybeExit();
        });
  }

  void SetTimer(uint64_t id, double delay_ms) {
    uv_timer_t*& t = timers[id];
    if (!t) {
      t = new uv_timer_t;
      uv_timer_init(&loop, t);
      t->data = this;
    }
    // The id travels in the handle's own map entry; look it up on firing.
    uv_timer_start(
        t,
        [](uv_timer_t* t) {
          auto* n = static_cast<Impl*>(t->data);
          for (auto it = n->timers.begin(); it != n->timers.end(); ++it) {
            if (it->second != t) continue;
            const uint64_t id = it->first;
            n->timers.erase(it);
            uv_close(reinterpret_cast<uv_handle_t*>(t),
                     [](uv_handle_t* h) { delete reinterpret_cast<uv_timer_t*>(h); });
            if (n->started && !n->finished) n->Handle(n->protocol->OnTimer(id));
            return;
          }
        },
        static_cast<uint64_t>(std::max(0.0, delay_ms)), 0);
  }

  void Train() {
    if (training) return;
    training = true;
    std::shared_ptr<const ModelState> start = protocol->model();
    const uint64_t round = protocol->rounds_completed();
    auto result = std::make_shared<Result<ModelState>>(InvalidArgumentError("not trained"));
    work->OffLoop([this, start, round, result] { *result = trainer->Train(*start, round); },
                  [this, start, round, result] {
                    training = false;
                    if (finished) return MaybeExit();
                    if (!result->ok()) {
                      spdlog::warn("training round {} failed ({}); keeping the model", round,
                                   result->status().message());
                      *result = ModelState(*start);
                    }
                    Handle(protocol->OnTrained(std::move(*result).value()));
                  });
  }

  // The node's own model on the trainer's held-out data, on a worker thread.
  void Evaluate() {
    if (eval_in_flight) return;
    eval_in_flight = true;
    std::shared_ptr<const ModelState> model = protocol->model();
    const uint64_t round = protocol->rounds_completed();
    auto accuracy = std::make_shared<Result<double>>(InvalidArgumentError("not evaluated"));
    work->OffLoop([this, model, accuracy] { *accuracy = trainer->Evaluate(*model); },
                  [this, round, accuracy] {
                    eval_in_flight = false;
                    if (accuracy->ok()) {
                      stats.accuracy = **accuracy;
                      stats.accuracy_round = round;
                      spdlog::info("peer {}: own model accuracy {:.4f} after {} rounds", o.self, **accuracy, round);
                    }
                    MaybeExit();
                  });
  }

  void Save() {
    if (!store) return;
    if (save_in_flight) {
      save_again = true;
      return;
    }
    save_in_flight = true;
    const uint64_t rounds = protocol->rounds_completed();
    std::shared_ptr<const ModelState> model = protocol->model();
    auto members = std::make_shared<std::vector<MemberUpdate>>(membership->Snapshot());
    auto status = std::make_shared<Status>(Status::Ok());
    work->OffLoop([this, rounds, model, members, status] { *status = store->Save(o.self, rounds, *model, *members); },
                  [this, status] {
                    save_in_flight = false;
                    if (!status->ok()) spdlog::error("cannot save the peer's state: {}", status->message());
                    if (save_again) {
                      save_again = false;
                      if (!finished) Save();
                    }
                    MaybeExit();
                  });
  }

  void Progress() {
    if (!on_progress) return;
    stats.members = membership->Snapshot();
    on_progress(stats);
  }

  // ---- semi-decentralized: the server ----------------------------------------------------------

  // The server's average comes back as the server node's reply, checked like any model; without
  // one (the server is down, a sampled peer is missing) the protocol's wait timer goes on alone.
  void ExchangeWithServer(Message m) {
    if (exchange_in_flight || finished) return;
    exchange_in_flight = true;
    auto result = std::make_shared<Result<ModelState>>(InvalidArgumentError("not exchanged"));
    work->OffLoop([this, m, result] { *result = o.server->Exchange(*m.model, m.round); },
                  [this, round = m.round, result] {
                    exchange_in_flight = false;
                    Status check = result->ok() ? (*result)->CheckSameLayout(*protocol->model()) : result->status();
                    if (check.ok()) check = (*result)->CheckFinite();
                    if (!check.ok()) {
                      if (!finished) spdlog::warn("round {}: no average from the server: {}", round, check.message());
                      return MaybeExit();
                    }
                    ++stats.server_exchanges;
                    spdlog::info("round {}: took the server's average (version {})", round, (*result)->version());
                    Deliver(static_cast<NodeId>(o.nodes),
                            Message{Message::Kind::kModelReply, round,
                                    std::make_shared<const ModelState>(std::move(*result).value()), 0.0, 0});
                    MaybeExit();
                  });
  }

  // ---- CRDT gossip: pulls from peers' replicas -----------------------------------------------

  void QueueSync(const Actions::Sync& s) {
    if (finished || s.from >= o.nodes || s.from == o.self) return;
    for (const Actions::Sync& q : sync_queue) {
      if (q.from == s.from && q.round == s.round) return;
    }
    sync_queue.push_back(s);
    PumpSyncs();
  }

  // One pull at a time: a copy of this node's replica syncs from the peer's on a worker thread
  // (the loop keeps answering everyone meanwhile), and the protocol joins the copy.
  void PumpSyncs() {
    if (sync_in_flight || sync_queue.empty() || finished) return;
    const Actions::Sync s = sync_queue.front();
    sync_queue.pop_front();
    const CrdtReplica* mine = protocol->replica(s.round);
    auto copy =
        std::make_shared<CrdtReplica>(mine ? *mine : CrdtReplica("peer-" + std::to_string(o.self), &author_keys));
    auto result = std::make_shared<Result<size_t>>(InvalidArgumentError("not synced"));
    sync_in_flight = true;
    work->OffLoop(
        [this, s, copy, result] {
          NetworkSyncPeer peer(
              s.round,
              [this, to = s.from](v1::CrdtRequest request) -> Result<CrdtAnswer> {
                auto promise = std::make_shared<std::promise<Result<CrdtAnswer>>>();
                std::future<Result<CrdtAnswer>> answer = promise->get_future();
                work->Post([this, to, request = std::move(request), promise]() mutable {
                  SendCrdtRequest(to, std::move(request), promise);
                });
                if (answer.wait_for(kCrdtAnswerTimeout) != std::future_status::ready) {
                  return UnavailableError("peer " + std::to_string(to) + " did not answer in " +
                                          std::to_string(kCrdtAnswerTimeout.count()) + " s");
                }
                return answer.get();
              },
              &author_keys);
          *result = copy->SyncFrom(peer);
        },
        [this, s, copy, result] {
          sync_in_flight = false;
          if (!result->ok())
            spdlog::debug("pull from peer {} (round {}): {}", s.from, s.round, result->status().message());
          if (started && !finished) Handle(protocol->OnSynced(s.from, s.round, result->ok() ? copy.get() : nullptr));
          PumpSyncs();
          MaybeExit();
        });
  }

  void SendCrdtRequest(NodeId to, v1::CrdtRequest request, std::shared_ptr<std::promise<Result<CrdtAnswer>>> promise) {
    Connection* c = finished ? nullptr : LinkTo(to);
    if (!c || c->closing) {
      promise->set_value(UnavailableError("no link to peer " + std::to_string(to)));
      return;
    }
    const uint64_t id = next_crdt_request++;
    request.set_id(id);
    crdt_pending[id] = CrdtPending{c, std::move(promise), {}, 0};
    v1::GossipEnvelope e = Envelope();
    *e.mutable_crdt_request() = std::move(request);
    SendEnvelope(c, e);
  }

  // Ends the requests waiting on link `c` with Unavailable; with null, every request, whose
  // answers still on their way are then read and dropped (not refused as unasked for).
  void FailCrdtRequests(Connection* c, const std::string& why) {
    for (auto it = crdt_pending.begin(); it != crdt_pending.end();) {
      if (c != nullptr && it->second.conn != c) {
        ++it;
        continue;
      }
      if (!it->second.abandoned) it->second.promise->set_value(UnavailableError(why));
      it->second.abandoned = true;
      it = c != nullptr ? crdt_pending.erase(it) : std::next(it);
    }
  }

  void AnswerCrdtRequestWith(std::map<uint64_t, CrdtPending>::iterator it, Result<CrdtAnswer> answer) {
    if (!it->second.abandoned) it->second.promise->set_value(std::move(answer));
    crdt_pending.erase(it);
  }

  // A peer asks about this node's replica: the answer, then the fetched contributions' deltas as
  // model streams (the reply goes out first: control frames precede chunks).
  void AnswerCrdt(Connection* c, const v1::CrdtRequest& request) {
    std::vector<std::shared_ptr<const ModelState>> deltas;
    v1::GossipEnvelope e = Envelope();
    v1::CrdtReply* reply = e.mutable_crdt_reply();
    *reply = AnswerCrdtRequest(protocol ? protocol->replica(request.round()) : nullptr, request, &deltas);
    for (size_t i = 0; i < deltas.size(); ++i) {
      auto prefix = std::make_shared<const std::string>(SafetensorsPrefix(*deltas[i]));
      const std::string_view values(reinterpret_cast<const char*>(deltas[i]->data().data()), deltas[i]->num_bytes());
      OutboundStream stream{deltas[i], prefix, c->next_stream++};
      v1::CrdtContribution* w = reply->mutable_contributions(static_cast<int>(i));
      w->set_stream(stream.id);
      w->set_total_bytes(stream.size());
      w->set_sha256(Sha256Hex({*prefix, values}));
      c->streams.push_back(std::move(stream));
    }
    SendEnvelope(c, e);
  }

  void CrdtReplyArrived(Connection* c, const v1::CrdtReply& reply) {
    auto it = crdt_pending.find(reply.id());
    if (it == crdt_pending.end() || it->second.conn != c) return Refuse(c, "a CRDT reply to no request of this link");
    CrdtPending& p = it->second;
    for (int i = 0; i < reply.contributions_size(); ++i) {
      const v1::CrdtContribution& w = reply.contributions(i);
      if (c->inbound.size() >= kMaxInboundStreams || c->inbound.count(w.stream())) {
        return Refuse(c, "too many model streams at once, or a stream id reused");
      }
      auto assembler = ModelAssembler::Begin(w.total_bytes(), w.sha256(), stream_limit);
      if (!assembler.ok()) return Refuse(c, assembler.status().message());
      v1::GossipModel header;
      header.set_kind(v1::GossipModel::CRDT_DELTA);
      header.set_stream(w.stream());
      header.set_total_bytes(w.total_bytes());
      header.set_sha256(w.sha256());
      header.set_request(reply.id());
      header.set_part(static_cast<uint32_t>(i));
      c->inbound.emplace(w.stream(), InboundStream{header, std::move(assembler).value(), 0, NowMs(&loop)});
    }
    p.answer.reply = reply;
    p.answer.deltas.resize(static_cast<size_t>(reply.contributions_size()));
    p.deltas_left = p.answer.deltas.size();
    if (p.deltas_left == 0) AnswerCrdtRequestWith(it, std::move(p.answer));
  }

  void CrdtDeltaDecoded(NodeId from, const v1::GossipModel& h, Result<ModelState> model) {
    auto it = crdt_pending.find(h.request());
    if (it == crdt_pending.end()) return;  // its link closed meanwhile: the pull has failed already
    CrdtPending& p = it->second;
    const Status check = model.status();  // decoded and checked on the worker
    if (!check.ok() || h.part() >= p.answer.deltas.size()) {
      ++stats.frames_refused;
      spdlog::warn("refused a contribution from peer {}: {}", from, check.ok() ? "out of place" : check.message());
      return AnswerCrdtRequestWith(it,
                                   InvalidArgumentError("peer " + std::to_string(from) + " sent a bad contribution"));
    }
    p.answer.deltas[h.part()] = std::move(model).value();
    if (--p.deltas_left == 0) AnswerCrdtRequestWith(it, std::move(p.answer));
  }

  // ---- leaving -------------------------------------------------------------------------------

  // The last round is done (or a stop was asked for): say goodbye, give the queued models
  // `linger_ms` to go out, then close everything.
  void Finish(double linger_ms) {
    if (finished) return;
    finished = true;
    final_model = protocol->model();
    sync_queue.clear();
    FailCrdtRequests(nullptr, "this node is leaving");
    if (exchange_in_flight) o.server->Cancel();
    if (started) Handle(protocol->Leave());
    leave_pending = true;
    SendLeaveWhenReady();
    linger_started = true;
    uv_timer_start(
        &linger,
        [](uv_timer_t* t) {
          auto* n = static_cast<Impl*>(t->data);
          // First the linger, then once a second until the links have drained (at most a minute).
          if (n->linger_ms_over) ++n->drain_waits;
          n->linger_ms_over = true;
          n->MaybeExit();
        },
        static_cast<uint64_t>(linger_ms), 1000);
    MaybeExit();
  }
  // The goodbye goes out on each peer's message link after every model already handed to the
  // links (encodings still in flight included), so that it never overtakes the last model.
  void SendLeaveWhenReady() {
    if (!leave_pending || !encoding.empty()) return;
    leave_pending = false;
    v1::GossipEnvelope bye = Envelope();
    *bye.mutable_leave() = ToProto(membership->Leave());
    for (const auto& [peer, c] : std::map<NodeId, Connection*>(links)) {
      if (c->hello_in && !c->closing) SendEnvelope(c, bye);
    }
  }

  bool Drained() const {
    for (Connection* c : connections) {
      if (c->ready() && (!c->control.empty() || !c->streams.empty() || c->writing > 0)) return false;
    }
    return true;
  }

  void MaybeExit() {
    if (!finished || exiting || training || save_in_flight || eval_in_flight || sync_in_flight || exchange_in_flight ||
        !encoding.empty()) {
      return;
    }
    // After the linger, the queued models still go out (a peer waits for them), unless a link
    // does not drain within a minute.
    const bool drained = Drained();
    if (!(drained && (linger_ms_over || stopping)) && drain_waits < kMaxDrainWaits) return;
    exiting = true;
    for (Connection* c : std::vector<Connection*>(connections.begin(), connections.end())) Close(c, "leaving");
    for (auto& [id, t] : timers) {
      uv_close(reinterpret_cast<uv_handle_t*>(t), [](uv_handle_t* h) { delete reinterpret_cast<uv_timer_t*>(h); });
    }
    timers.clear();
    uv_close(reinterpret_cast<uv_handle_t*>(&tick), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&linger), nullptr);
    work->Close();
    uv_close(reinterpret_cast<uv_handle_t*>(&server), nullptr);
  }

  // ---- running -------------------------------------------------------------------------------

  Result<PeerNodeStats> Run() {
    uint64_t start_round = 0;
    std::vector<MemberUpdate> saved_members;
    if (store) {
      PLEXUS_ASSIGN_OR_RETURN(std::optional<SavedPeer> saved, store->Load(o.self));
      if (saved) {
        if (Status s = saved->model.CheckSameLayout(initial); !s.ok()) {
          return FailedPreconditionError("the model in the --db is not this run's model: " + s.message());
        }
        initial = std::move(saved->model);
        start_round = saved->rounds;
        saved_members = std::move(saved->members);
        rejoining = true;
        stats.resumed = true;
        spdlog::info("continuing from round {} saved in the database", start_round);
      }
    }
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
    PLEXUS_ASSIGN_OR_RETURN(Topology topology, Topology::Parse(topo_spec, o.nodes, o.seed));

    PLEXUS_ASSIGN_OR_RETURN(crdt_key, SigningKey::Generate());
    author_keys.Add("peer-" + std::to_string(o.self), crdt_key.public_key());
    uv_loop_init(&loop);
    work = std::make_unique<LoopWork>(&loop);
    uv_tcp_init(&loop, &server);
    server.data = this;
    int rc = uv_tcp_bind(&server, reinterpret_cast<const sockaddr*>(&listen_addr), 0);
    if (rc == 0) {
      rc = uv_listen(reinterpret_cast<uv_stream_t*>(&server), 128, [](uv_stream_t* s, int status) {
        auto* n = static_cast<Impl*>(s->data);
        if (status < 0 || n->exiting) return;
        Connection* c = n->NewConnection(false);
        if (uv_accept(s, reinterpret_cast<uv_stream_t*>(&c->tcp)) != 0) return n->Close(c, "accept failed");
        n->Connected(c);
      });
    }
    if (rc != 0) {
      uv_close(reinterpret_cast<uv_handle_t*>(&server), nullptr);
      work->Close();
      uv_run(&loop, UV_RUN_DEFAULT);
      uv_loop_close(&loop);
      return UnavailableError("cannot listen on " + o.listen + ": " + uv_strerror(rc));
    }
    sockaddr_storage bound{};
    int len = sizeof bound;
    uv_tcp_getsockname(&server, reinterpret_cast<sockaddr*>(&bound), &len);
    char host[64] = {0};
    int port = 0;
    if (bound.ss_family == AF_INET) {
      uv_ip4_name(reinterpret_cast<sockaddr_in*>(&bound), host, sizeof host);
      port = ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    } else {
      uv_ip6_name(reinterpret_cast<sockaddr_in6*>(&bound), host, sizeof host);
      port = ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
    }
    address = o.advertise.empty() ? std::string(host) + ":" + std::to_string(port) : o.advertise;

    // A restarted node's incarnation must beat the one it died with: the wall clock does.
    const auto incarnation = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count());
    membership = std::make_unique<Membership>(o.self, address, incarnation, o.membership, o.seed);
    view = std::make_unique<MembershipView>(std::move(topology), membership.get());
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
    stream_limit = std::min<uint64_t>(o.max_model_bytes, 2 * own_bytes + (1 << 20));
    link_cap = std::max<uint64_t>(one_model, o.inbound_budget / 4);
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
      Finish(0);
    }
    // Seeds, and the members a restarted node remembers, dialled from the first tick on.
    for (const std::string& s : o.seeds) {
      if (s != address) dial_until_met.push_back(s);
    }
    for (const MemberUpdate& u : saved_members) {
      if (u.state != MemberState::kLeft && u.node < o.nodes && u.node != o.self) dial_until_met.push_back(u.address);
    }
    start_ms = NowMs(&loop);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    if (!final_model) final_model = protocol->model();
    stats.members = membership->Snapshot();
    PLEXUS_RETURN_IF_ERROR(fatal);
    return stats;
  }
};

PeerNode::PeerNode(PeerNodeOptions options, const ProtocolFactory* factory, ModelState initial, PeerTrainer* trainer,
                   PeerStore* store)
    : impl_(std::make_unique<Impl>(std::move(options), factory, std::move(initial), trainer, store)) {}

PeerNode::~PeerNode() = default;

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
