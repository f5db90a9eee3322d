#include "gossip/node/peer_links.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <climits>
#include <optional>
#include <span>
#include <utility>

#include "core/crc32c.h"
#include "gossip/node/peer_address.h"

namespace plexus::gossip {
namespace {

constexpr size_t kReadBufferBytes = 1 << 20;  // loopback reads deliver up to ~1 MiB at once
constexpr size_t kMaxInboundStreams = 64;     // models announced and not yet complete, per link
constexpr double kAnsweredLinkMs = 10000;     // a gRPC client's link, answered, kept open for it

// One uv_write: bytes it owns (a frame, ciphertext, or a chunk's header and CRC) around bytes it
// borrows from a model (a plaintext chunk, written from where the model holds it), kept alive by
// `borrowed_owner` until the write completes.
struct WriteRequest {
  uv_write_t req;
  PeerLinks::Link* link;
  std::string bytes;
  std::string trailer;
  std::shared_ptr<const void> borrowed_owner;
  size_t size = 0;
};

uv_stream_t* Stream(PeerLinks::Link* link) { return reinterpret_cast<uv_stream_t*>(&link->tcp); }

}  // namespace

PeerLinks::PeerLinks(uv_loop_t* loop, PeerLinksOptions options, Owner* owner)
    : loop_(loop), o_(std::move(options)), owner_(owner), read_buffer_(kReadBufferBytes, '\0') {}

PeerLinks::~PeerLinks() = default;

Result<std::string> PeerLinks::Listen(const sockaddr_storage& address) {
  uv_tcp_init(loop_, &server_);
  server_.data = this;
  listening_ = true;
  int rc = uv_tcp_bind(&server_, reinterpret_cast<const sockaddr*>(&address), 0);
  if (rc == 0) {
    rc = uv_listen(reinterpret_cast<uv_stream_t*>(&server_), 128, [](uv_stream_t* s, int status) {
      auto* links = static_cast<PeerLinks*>(s->data);
      if (status < 0 || links->closed_) return;
      Link* c = links->NewLink(false);
      if (uv_accept(s, Stream(c)) != 0) return links->Close(c, "accept failed");
      links->Connected(c);
    });
  }
  if (rc != 0) {
    uv_close(reinterpret_cast<uv_handle_t*>(&server_), nullptr);
    listening_ = false;
    return UnavailableError(std::string("cannot listen: ") + uv_strerror(rc));
  }
  sockaddr_storage bound{};
  int len = sizeof bound;
  uv_tcp_getsockname(&server_, reinterpret_cast<sockaddr*>(&bound), &len);
  char host[64] = {0};
  int port = 0;
  if (bound.ss_family == AF_INET) {
    uv_ip4_name(reinterpret_cast<sockaddr_in*>(&bound), host, sizeof host);
    port = ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  } else {
    uv_ip6_name(reinterpret_cast<sockaddr_in6*>(&bound), host, sizeof host);
    port = ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

void PeerLinks::SetStreamLimits(uint64_t stream_limit, uint64_t link_cap) {
  stream_limit_ = stream_limit;
  link_cap_ = link_cap;
}

// ---- opening ---------------------------------------------------------------------------------

PeerLinks::Link* PeerLinks::NewLink(bool initiator) {
  auto* c = new Link(o_.max_frame_bytes);
  c->links = this;
  uv_tcp_init(loop_, &c->tcp);
  c->tcp.data = c;
  if (o_.tls) c->tls = std::make_unique<TlsChannel>(*o_.tls, initiator);
  // A chunk of the model stream due goes straight into the model: on a plaintext link the
  // kernel writes it there (StartReading), over TLS the decrypted bytes are copied there once.
  c->reader.set_placer([c](uint32_t stream, uint32_t index, size_t bytes) {
    auto it = c->inbound.find(stream);
    return it == c->inbound.end() ? std::span<char>() : it->second.assembler.Destination(index, bytes);
  });
  links_.insert(c);
  // The hello goes first on every link; an accepted link's waits for the dialer's first bytes.
  if (initiator) {
    c->sniffed = true;
    c->control.push_back(EncodeFrame(FrameType::kMessage, 0, 0, owner_->Hello().SerializeAsString()));
  }
  return c;
}

PeerLinks::Link* PeerLinks::Dial(const std::string& address, NodeId peer) {
  if (closed_) return nullptr;
  auto ss = ResolvePeerAddress(address);
  if (!ss.ok()) return nullptr;
  Link* c = NewLink(true);
  c->dialed = address;
  auto* req = new uv_connect_t;
  req->data = c;
  const int rc =
      uv_tcp_connect(req, &c->tcp, reinterpret_cast<const sockaddr*>(&ss.value()), [](uv_connect_t* req, int status) {
        auto* c = static_cast<Link*>(req->data);
        delete req;
        if (status < 0) return c->links->Close(c, std::string("connect: ") + uv_strerror(status));
        c->links->Connected(c);
      });
  if (rc < 0) {
    delete req;
    Close(c, "connect failed");
    return nullptr;
  }
  if (peer != kNoPeer) {
    c->peer = peer;
    by_peer_[peer] = c;
  }
  return c;
}

void PeerLinks::Connected(Link* c) {
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

PeerLinks::Link* PeerLinks::Find(NodeId peer) const {
  auto it = by_peer_.find(peer);
  return it == by_peer_.end() ? nullptr : it->second;
}

void PeerLinks::Bind(Link* c, NodeId peer) {
  c->hello_in = true;
  c->peer = peer;
  by_peer_.try_emplace(peer, c);
}

bool PeerLinks::IsLinked(NodeId peer) const {
  return std::any_of(links_.begin(), links_.end(), [&](Link* c) { return c->peer == peer && !c->closing; });
}

bool PeerLinks::HasUnfinishedStream(NodeId peer) const {
  return std::any_of(links_.begin(), links_.end(), [&](Link* c) { return c->peer == peer && !c->inbound.empty(); });
}

// ---- writing ---------------------------------------------------------------------------------

void PeerLinks::Send(Link* c, const v1::GossipEnvelope& e) {
  c->control.push_back(EncodeFrame(FrameType::kMessage, 0, 0, e.SerializeAsString()));
  Pump(c);
}

uint32_t PeerLinks::QueueStream(Link* c, OutboundStream stream) {
  stream.id = c->next_stream++;
  c->streams.push_back(std::move(stream));
  return c->streams.back().id;
}

void PeerLinks::WriteRaw(Link* c, std::string bytes) { WriteGathered(c, std::move(bytes), {}, "", nullptr); }

void PeerLinks::WriteGathered(Link* c, std::string head, std::string_view borrowed, std::string trailer,
                              std::shared_ptr<const void> borrowed_owner) {
  if (c->closing) return;
  auto* w = new WriteRequest{{}, c, std::move(head), std::move(trailer), std::move(borrowed_owner), 0};
  w->req.data = w;
  std::array<uv_buf_t, 3> bufs;
  unsigned n = 0;
  auto add = [&](char* data, size_t size) {
    if (size == 0) return;
    bufs[n++] = uv_buf_init(data, static_cast<unsigned>(size));
    w->size += size;
  };
  add(w->bytes.data(), w->bytes.size());
  // uv_write only reads the buffers it is given; its signature is not const-correct.
  add(const_cast<char*>(borrowed.data()), borrowed.size());
  add(w->trailer.data(), w->trailer.size());
  if (n == 0) {
    delete w;
    return;
  }
  counters_.bytes_sent += w->size;
  c->writing += w->size;
  const int rc = uv_write(&w->req, Stream(c), bufs.data(), n, [](uv_write_t* req, int status) {
    auto* w = static_cast<WriteRequest*>(req->data);
    Link* c = w->link;
    c->writing -= w->size;
    delete w;
    if (status < 0) return c->links->Close(c, "write failed");
    c->links->Pump(c);
  });
  if (rc < 0) {
    c->writing -= w->size;
    delete w;
    Close(c, "write failed");
  }
}

void PeerLinks::WriteFrame(Link* c, std::string frame) {
  if (!c->tls) return WriteRaw(c, std::move(frame));
  std::string cipher;
  Status s = c->tls->Write(frame, &cipher);
  WriteRaw(c, std::move(cipher));
  if (!s.ok()) Close(c, s.message());
}

// A chunk of model bytes, never copied into a frame: on a plaintext link the socket writes it
// from the model's own memory between its header and CRC; over TLS it is encrypted from there
// (the records authenticate it, so no CRC).
void PeerLinks::WriteChunk(Link* c, const OutboundStream& s, size_t n) {
  const auto [prefix_part, body] = s.Pieces(n);
  if (!c->tls) {
    std::string head = EncodeFrameHeader(FrameType::kCheckedChunk, s.id, s.index, n + kChunkCrcBytes);
    // The chunk's own CRC once per model, whatever the number of links it goes out on.
    std::optional<uint32_t> bytes_crc = s.crcs ? s.crcs->Get(s.index, n) : std::nullopt;
    if (!bytes_crc) {
      bytes_crc = ExtendCrc32c(Crc32c(prefix_part), body);
      if (s.crcs) s.crcs->Put(s.index, n, *bytes_crc);
    }
    std::string trailer = CheckedChunkTrailerOfCrc(head, *bytes_crc, n);
    head.append(prefix_part);  // small, and in the first chunks only
    return WriteGathered(c, std::move(head), body, std::move(trailer), s.body_owner());
  }
  std::string cipher;
  Status st = c->tls->Write(EncodeFrameHeader(FrameType::kChunk, s.id, s.index, n), &cipher);
  for (std::string_view piece : {prefix_part, body}) {
    if (st.ok() && !piece.empty()) st = c->tls->Write(piece, &cipher);
  }
  WriteRaw(c, std::move(cipher));
  if (!st.ok()) Close(c, st.message());
}

void PeerLinks::Pump(Link* c) {
  if (c->closing || !c->ready()) return;
  while (!c->closing && c->writing < o_.write_high_water) {
    if (!c->control.empty()) {
      std::string f = std::move(c->control.front());
      c->control.pop_front();
      WriteFrame(c, std::move(f));
      continue;
    }
    if (c->streams.empty()) break;
    OutboundStream& s = c->streams.front();
    const size_t n = std::min(o_.chunk_bytes, s.size() - s.offset);
    WriteChunk(c, s, n);
    ++s.index;
    s.offset += n;
    if (s.offset == s.size()) c->streams.pop_front();
  }
  if (c->close_when_drained && c->control.empty() && c->writing == 0) return Close(c, "status sent");
  owner_->OnIdle();
}

bool PeerLinks::Drained() const {
  return std::none_of(links_.begin(), links_.end(), [](Link* c) {
    return c->ready() && (!c->control.empty() || !c->streams.empty() || c->writing > 0);
  });
}

// ---- reading ---------------------------------------------------------------------------------

void PeerLinks::StartReading(Link* c) {
  uv_read_start(
      Stream(c),
      [](uv_handle_t* h, size_t, uv_buf_t* buf) {
        auto* c = static_cast<Link*>(h->data);
        std::string& b = c->links->read_buffer_;
        // A plaintext link reads a placed chunk's body into the model itself, and between bodies
        // only up to the next body (FrameReader::ReadLimit); a TLS link reads records.
        const std::span<char> place = c->tls ? std::span<char>() : c->reader.PlacedTarget();
        if (!place.empty()) {
          *buf = uv_buf_init(place.data(), static_cast<unsigned>(std::min<size_t>(place.size(), UINT_MAX)));
          return;
        }
        const size_t limit = c->tls ? b.size() : std::min(b.size(), c->reader.ReadLimit());
        *buf = uv_buf_init(b.data(), static_cast<unsigned>(limit));
      },
      [](uv_stream_t* s, ssize_t n, const uv_buf_t* buf) {
        auto* c = static_cast<Link*>(s->data);
        if (n > 0 && buf->base != c->links->read_buffer_.data()) {  // into a placed chunk's body
          c->links->counters_.bytes_received += static_cast<uint64_t>(n);
          c->reader.Placed(static_cast<size_t>(n));
          return;
        }
        // A link that ends during the TLS handshake is closed, not counted as refused: the other
        // end may have dropped a duplicate link or died, and a certificate it refused arrives as
        // an alert, which the handshake reports (and Received refuses) before the end of stream.
        if (n < 0 && c->tls && !c->tls->established()) {
          spdlog::info("a link{} ended during the TLS handshake",
                       c->peer != kNoPeer ? " to peer " + std::to_string(c->peer) : std::string());
          return c->links->Close(c, "ended during the TLS handshake");
        }
        if (n < 0) return c->links->Close(c, n == UV_EOF ? "closed by the peer" : uv_strerror(static_cast<int>(n)));
        if (n > 0) c->links->Received(c, std::string_view(buf->base, static_cast<size_t>(n)));
      });
}

void PeerLinks::Received(Link* c, std::string_view bytes) {
  counters_.bytes_received += bytes.size();
  if (c->tls) {
    // Record by record as each is decrypted: a model's chunks go from there into the model (no
    // buffer of the whole read's plaintext in between).
    const bool was = c->tls->established();
    std::string out;
    Status s = c->tls->Feed(
        bytes,
        [&](std::string_view plain) {
          // What the channel made before this record (the handshake's last flight, bytes written
          // while it ran) goes out before anything handling the record writes.
          if (!out.empty()) {
            WriteRaw(c, std::move(out));
            out.clear();
          }
          Deliver(c, plain);
          return !c->closing;
        },
        &out);
    WriteRaw(c, std::move(out));
    if (!s.ok() && !c->closing) return Refuse(c, s.message());
    if (!was && c->tls->established()) Pump(c);
  } else {
    Deliver(c, bytes);
  }
  if (!c->closing && !c->paused && inbound_bytes_ > o_.inbound_budget) {
    c->paused = true;
    uv_read_stop(Stream(c));
  }
}

void PeerLinks::Deliver(Link* c, std::string_view data) {
  if (data.empty() || c->closing) return;
  std::string first;
  if (!c->sniffed) {
    c->first_bytes.append(data);
    if (c->first_bytes.size() < 4) return;
    first = std::move(c->first_bytes);
    c->first_bytes.clear();
    data = first;
    c->sniffed = true;
    if (!Greet(c, data)) return;
  }
  if (c->http2) {
    std::string answer = c->http2->Feed(data);
    if (!answer.empty()) WriteFrame(c, answer);
    if (c->http2->failed() && !c->closing) Close(c, "not HTTP/2 after all");
    return;
  }
  Status s = c->reader.Read(data, [&](const FrameView& f) {
    HandleFrame(c, f);
    return !c->closing;
  });
  if (!s.ok() && !c->closing) Refuse(c, s.message());
}

bool PeerLinks::Greet(Link* c, std::string_view first) {
  const ForeignStart start = RecogniseStart(first);
  if (start == ForeignStart::kGrpcClient) {
    ++counters_.refused;
    spdlog::warn(
        "a gRPC client (plexus client, or plexus status --server) reached this peer's port: told it "
        "to use a plexus server's address");
    c->http2 = std::make_unique<Http2Refusal>(LocalAddress(c) +
                                              " is a plexus peer: plexus client and plexus status --server need a "
                                              "plexus server's address (plexus status --peer asks a peer)");
    c->refusing_since_ms = static_cast<double>(uv_now(loop_));
    return true;
  }
  if (start == ForeignStart::kHttpRequest) {
    ++counters_.refused;
    spdlog::warn("plain HTTP reached this peer's port: answered 400");
    const std::string body = LocalAddress(c) +
                             " is a plexus peer, which speaks only the peers' own protocol (the "
                             "dashboard and metrics are plexus server's --dashboard-listen and "
                             "--metrics-listen)\n";
    c->close_when_drained = true;
    WriteFrame(c, "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: " +
                      std::to_string(body.size()) + "\r\n\r\n" + body);
    return false;
  }
  c->control.push_front(EncodeFrame(FrameType::kMessage, 0, 0, owner_->Hello().SerializeAsString()));
  Pump(c);
  return !c->closing;
}

std::string PeerLinks::LocalAddress(Link* c) const {
  sockaddr_storage local{};
  int len = sizeof local;
  char host[64] = {0};
  if (uv_tcp_getsockname(&c->tcp, reinterpret_cast<sockaddr*>(&local), &len) != 0) return "this address";
  if (local.ss_family == AF_INET) {
    uv_ip4_name(reinterpret_cast<sockaddr_in*>(&local), host, sizeof host);
    return std::string(host) + ":" + std::to_string(ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port));
  }
  uv_ip6_name(reinterpret_cast<sockaddr_in6*>(&local), host, sizeof host);
  return "[" + std::string(host) + "]:" + std::to_string(ntohs(reinterpret_cast<sockaddr_in6*>(&local)->sin6_port));
}

void PeerLinks::HandleFrame(Link* c, const FrameView& f) {
  if (f.type == FrameType::kChunk) return HandleChunk(c, f);
  v1::GossipEnvelope e;
  if (!e.ParseFromArray(f.payload.data(), static_cast<int>(f.payload.size()))) return Refuse(c, "malformed message");
  owner_->OnEnvelope(c, e);
}

Status PeerLinks::Expect(Link* c, const v1::GossipModel& header, bool bytes_stream) {
  if (c->inbound.size() >= kMaxInboundStreams || c->inbound.count(header.stream())) {
    return InvalidArgumentError("too many model streams at once, or a stream id reused");
  }
  // Without a hash the link vouches for the bytes (TLS records, or every chunk's CRC-32C).
  auto assembler = bytes_stream ? ModelAssembler::BeginBytes(header.total_bytes(), header.sha256(), stream_limit_)
                   : header.sha256().empty()
                       ? ModelAssembler::BeginUnhashed(header.total_bytes(), stream_limit_)
                       : ModelAssembler::Begin(header.total_bytes(), header.sha256(), stream_limit_);
  PLEXUS_RETURN_IF_ERROR(assembler.status());
  c->inbound.emplace(header.stream(),
                     InboundStream{header, std::move(assembler).value(), 0, static_cast<double>(uv_now(loop_))});
  return Status::Ok();
}

void PeerLinks::HandleChunk(Link* c, const FrameView& f) {
  // Nothing else guards a plaintext link's bytes: every chunk must carry its CRC.
  if (!c->tls && !f.checked) return Refuse(c, "a chunk without its CRC-32C on a plaintext link");
  auto it = c->inbound.find(f.stream);
  if (it == c->inbound.end()) return Refuse(c, "a chunk of an unannounced model stream");
  if (Status s = it->second.assembler.Add(f.index, f.payload); !s.ok()) return Refuse(c, s.message());
  it->second.received += f.payload.size();
  it->second.last_progress_ms = static_cast<double>(uv_now(loop_));
  inbound_bytes_ += f.payload.size();
  c->unfinished_bytes += f.payload.size();
  if (it->second.assembler.complete()) {
    InboundStream in = std::move(it->second);
    c->inbound.erase(it);
    c->unfinished_bytes -= in.received;
    return owner_->OnStream(c, std::move(in));
  }
  if (c->unfinished_bytes > link_cap_) {
    Refuse(c, std::to_string(c->unfinished_bytes) + " bytes of unfinished models on one link, over its share of " +
                  std::to_string(link_cap_));
  }
}

void PeerLinks::Release(uint64_t bytes) {
  inbound_bytes_ -= std::min(inbound_bytes_, bytes);
  ResumeReading();
}

void PeerLinks::ResumeReading() {
  if (inbound_bytes_ > o_.inbound_budget) return;
  const double now = static_cast<double>(uv_now(loop_));
  for (Link* c : links_) {
    if (c->paused && !c->closing) {
      c->paused = false;
      for (auto& [id, in] : c->inbound) in.last_progress_ms = now;  // the pause was this node's doing
      StartReading(c);
    }
  }
}

void PeerLinks::CloseStalledStreams(double now) {
  std::vector<std::pair<Link*, uint64_t>> stalled;
  std::vector<Link*> answered;
  for (Link* c : links_) {
    if (c->closing) continue;
    if (c->http2 && now - c->refusing_since_ms >= kAnsweredLinkMs) answered.push_back(c);
    for (const auto& [id, in] : c->inbound) {
      if (now - in.last_progress_ms >= o_.inbound_stall_ms) {
        stalled.emplace_back(c, id);
        break;
      }
    }
  }
  for (auto [c, id] : stalled) {
    Refuse(c, "model stream " + std::to_string(id) + " delivered nothing for " +
                  std::to_string(static_cast<int64_t>(o_.inbound_stall_ms / 1000)) + " s");
  }
  for (Link* c : answered) Close(c, "a gRPC client, answered");
}

// ---- closing ---------------------------------------------------------------------------------

void PeerLinks::Close(Link* c, const std::string& why) {
  if (c->closing) return;
  c->closing = true;
  if (c->peer != kNoPeer) spdlog::debug("link to peer {} closed: {}", c->peer, why);
  if (auto it = by_peer_.find(c->peer); it != by_peer_.end() && it->second == c) by_peer_.erase(it);
  for (auto& [id, in] : c->inbound) inbound_bytes_ -= std::min<uint64_t>(inbound_bytes_, in.received);
  c->inbound.clear();
  c->unfinished_bytes = 0;
  links_.erase(c);
  owner_->OnClosed(c, why);
  uv_close(reinterpret_cast<uv_handle_t*>(&c->tcp), [](uv_handle_t* h) { delete static_cast<Link*>(h->data); });
  // Its bytes left the budget: links paused for them read again (they once stayed paused).
  if (!closed_) ResumeReading();
  owner_->OnIdle();
}

void PeerLinks::Refuse(Link* c, const std::string& why) {
  ++counters_.refused;
  spdlog::warn("refused {}{} (peer {}): {}", c->peer == kNoPeer ? "a link" : "a frame",
               c->dialed.empty() ? "" : " to " + c->dialed, c->peer == kNoPeer ? -1 : static_cast<int64_t>(c->peer),
               why);
  Close(c, why);
}

void PeerLinks::CloseAll() {
  closed_ = true;
  for (Link* c : std::vector<Link*>(links_.begin(), links_.end())) Close(c, "leaving");
  if (listening_) uv_close(reinterpret_cast<uv_handle_t*>(&server_), nullptr);
  listening_ = false;
}

}  // namespace plexus::gossip
