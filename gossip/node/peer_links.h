// PeerLinks: the TCP links of one peer (`plexus peer`) on its libuv loop: listening, dialling,
// TLS (tls_channel.h), frames (frame.h), the write pump and its backpressure, reading and the
// inbound budget, and the model streams each link carries (model_streams.h). It knows nothing of
// the protocol or the membership: what a link delivers goes to its Owner (the peer node), which
// decides who a link is (Bind after the hello) and what a message means.
//
// Backpressure: a link produces its next chunk only while fewer than `write_high_water` bytes
// wait in its socket, control frames (hello, pings, acks, replies) go before model chunks, and a
// link stops reading while more than `inbound_budget` bytes of models are being received or
// decoded. A completed stream's bytes stay in the budget until the owner Releases them (after
// decoding). Reading never waits on the node's own writes, so two peers sending each other large
// models do not deadlock.
//
// Owns its links and the listening socket; borrows the loop and the owner. Loop thread only.
#pragma once

#include <uv.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gossip/node/frame.h"
#include "gossip/node/http2_refusal.h"
#include "gossip/node/model_streams.h"
#include "gossip/node/tls_channel.h"
#include "gossip/protocol/protocol.h"
#include "plexus/v1/gossip.pb.h"

namespace plexus::gossip {

inline constexpr NodeId kNoPeer = ~NodeId{0};

struct PeerLinksOptions {
  uint32_t max_frame_bytes = (1u << 20) + 4096;
  size_t chunk_bytes = 256 << 10;
  size_t write_high_water = 4 << 20;
  uint64_t inbound_budget = 256ull << 20;
  double inbound_stall_ms = 30000;
  std::shared_ptr<const TlsContext> tls;  // null: plaintext
};

class PeerLinks {
 public:
  // One TCP connection. The owner reads `peer` (kNoPeer until dialled for a peer or bound after
  // its hello), `hello_in` and `tls`; everything else is the links'.
  struct Link {
    explicit Link(uint32_t max_frame) : reader(max_frame) {}
    bool ready() const { return connected && (!tls || tls->established()); }

    uv_tcp_t tcp;
    PeerLinks* links = nullptr;
    NodeId peer = kNoPeer;
    std::string dialed;      // HOST:PORT this side dialed; empty for an accepted link
    bool hello_in = false;   // the peer's hello arrived and the owner bound the link
    bool connected = false;  // TCP up
    bool closing = false;
    bool paused = false;              // reading stopped: the inbound budget is full
    bool close_when_drained = false;  // a status query: close once the answer is out
    // An accepted link says its hello once the first bytes show a peer dialed it (every dialer
    // speaks first): a gRPC client or a browser is answered in its own protocol instead.
    bool sniffed = false;                 // the first bytes were looked at (a dialed link's: none)
    std::string first_bytes;              // until four are in
    std::unique_ptr<Http2Refusal> http2;  // a gRPC client, being told where it is
    double refusing_since_ms = 0;
    std::unique_ptr<TlsChannel> tls;
    FrameReader reader;
    std::deque<std::string> control;     // small frames, sent before chunks
    std::deque<OutboundStream> streams;  // models, chunk by chunk
    size_t writing = 0;                  // bytes handed to uv_write, not yet written
    uint32_t next_stream = 1;
    std::map<uint32_t, InboundStream> inbound;
    uint64_t unfinished_bytes = 0;  // received of the streams in `inbound` (capped by link_cap)
  };

  // What the links tell the peer node. Every call comes on the loop thread, from inside a
  // PeerLinks call or a libuv callback.
  class Owner {
   public:
    virtual ~Owner() = default;
    // The first message of every new link (this node's hello).
    virtual v1::GossipEnvelope Hello() = 0;
    // A message arrived on `link` (before Bind: anything; the owner refuses what it must).
    virtual void OnEnvelope(Link* link, const v1::GossipEnvelope& envelope) = 0;
    // A model stream of `link` is complete; its bytes stay in the budget until Release.
    virtual void OnStream(Link* link, InboundStream stream) = 0;
    // `link` closed (its unfinished streams are given back to the budget already).
    virtual void OnClosed(Link* link, const std::string& why) = 0;
    // Bytes went out or a link closed: whatever waited for the links to drain may go on.
    virtual void OnIdle() = 0;
  };

  struct Counters {
    uint64_t bytes_sent = 0;
    uint64_t bytes_received = 0;
    uint64_t refused = 0;  // links and frames refused: malformed, oversized, stalled, failed handshakes
  };

  PeerLinks(uv_loop_t* loop, PeerLinksOptions options, Owner* owner);
  ~PeerLinks();
  PeerLinks(const PeerLinks&) = delete;
  PeerLinks& operator=(const PeerLinks&) = delete;

  // Binds and listens; returns the bound HOST:PORT. Unavailable when the address cannot be bound
  // (the listening handle is closed again: run the loop to let it go).
  Result<std::string> Listen(const sockaddr_storage& address);
  // What one announced model stream may hold, and one link's unfinished streams together.
  void SetStreamLimits(uint64_t stream_limit, uint64_t link_cap);

  // A new link to `address` (HOST:PORT), for `peer` (kNoPeer: whoever answers; a seed). Null when
  // the address does not parse or the dial fails at once, or after CloseAll.
  Link* Dial(const std::string& address, NodeId peer = kNoPeer);
  // The link `peer`'s messages go out on (null: none).
  Link* Find(NodeId peer) const;
  // After the owner accepted `link`'s hello from `peer`: the link is the peer's (unless it has
  // another already).
  void Bind(Link* link, NodeId peer);
  // Every link bound to a peer, by peer.
  std::map<NodeId, Link*> bound() const { return by_peer_; }
  // Whether any link of `peer` holds a model stream not yet complete.
  bool HasUnfinishedStream(NodeId peer) const;
  // Whether any link is bound to `peer` and not closing: what the peer sends may still arrive.
  bool IsLinked(NodeId peer) const;

  // Queues a message (a control frame) and sends what the link may send now.
  void Send(Link* link, const v1::GossipEnvelope& envelope);
  // Queues a model stream behind the link's control frames, giving it the link's next stream id
  // (returned). The header announcing it goes out with the next Send.
  uint32_t QueueStream(Link* link, OutboundStream stream);
  // Expects a model stream announced by `header` on `link`: a codec's bytes (`bytes_stream`) or
  // safetensors. InvalidArgument for too many streams at once, a stream id in use, or a size or
  // hash the stream limit refuses; the owner then refuses the link.
  Status Expect(Link* link, const v1::GossipModel& header, bool bytes_stream);
  // A completed stream's bytes leave the budget; paused links read again when it has room.
  void Release(uint64_t bytes);

  void Close(Link* link, const std::string& why);
  // Closes `link`, counting it refused, and says why in the log.
  void Refuse(Link* link, const std::string& why);
  // Refuses links whose announced models stopped arriving for inbound_stall_ms: a sender cannot
  // hold bytes of the budget (and so every link's reading) longer than that. Closes gRPC
  // clients' links answered more than 10 s ago that their clients left open.
  void CloseStalledStreams(double now_ms);
  // No link has anything waiting to go out.
  bool Drained() const;
  // Closes every link and the listening socket; no link opens after it.
  void CloseAll();

  const Counters& counters() const { return counters_; }

 private:
  Link* NewLink(bool initiator);
  void Connected(Link* link);
  void StartReading(Link* link);
  void Received(Link* link, std::string_view bytes);
  // Plaintext that arrived on the link (all of a plaintext link's bytes, or a TLS record's):
  // sniffed, answered in another protocol, or cut into frames.
  void Deliver(Link* link, std::string_view plaintext);
  // The first bytes of an accepted link: a peer's (say the hello), or another protocol's
  // (answered in it). False when the link is not a peer's.
  bool Greet(Link* link, std::string_view first);
  // This port, for answers to callers that reached it by mistake.
  std::string LocalAddress(Link* link) const;
  void HandleFrame(Link* link, const FrameView& frame);
  void HandleChunk(Link* link, const FrameView& frame);
  void ResumeReading();
  void WriteRaw(Link* link, std::string bytes);
  // `head`, then `borrowed` (bytes `borrowed_owner` keeps alive until written), then `trailer`,
  // in one write.
  void WriteGathered(Link* link, std::string head, std::string_view borrowed, std::string trailer,
                     std::shared_ptr<const void> borrowed_owner);
  void WriteFrame(Link* link, std::string frame);
  // The next `n` bytes of `stream` as one chunk frame.
  void WriteChunk(Link* link, const OutboundStream& stream, size_t n);
  // Sends what the link may send now: control frames first, then model chunks.
  void Pump(Link* link);

  uv_loop_t* const loop_;
  const PeerLinksOptions o_;
  Owner* const owner_;
  uv_tcp_t server_;
  bool listening_ = false;
  bool closed_ = false;  // CloseAll: no new links
  std::string read_buffer_;
  std::set<Link*> links_;
  std::map<NodeId, Link*> by_peer_;  // the link each peer's messages go out on
  uint64_t inbound_bytes_ = 0;       // of streams being received or decoded
  uint64_t stream_limit_ = 0, link_cap_ = 0;
  Counters counters_;
};

}  // namespace plexus::gossip
