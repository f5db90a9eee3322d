// The framing of a peer link (`plexus peer`): every frame is
//   u32 length (little-endian, of what follows) | u8 type | u32 stream | u32 index | payload
// A kMessage frame's payload is one protobuf plexus.v1.GossipEnvelope (proto/plexus/v1/gossip.proto);
// a kChunk frame carries bytes `index` of model stream `stream`, announced before by an envelope
// holding the stream's total size. A kCheckedChunk frame is the same with a u32 CRC-32C
// (core/crc32c.h) of type, stream, index and bytes after the bytes: what a plaintext link sends,
// so that a byte altered in flight is caught in the frame it hit, while it arrives. Over TLS the
// record layer already authenticates every byte, so chunks go unchecked there. A whole-stream
// SHA-256 in the announcement is needed only where the hash is the content's identity (CRDT
// contributions); models are not hashed in a separate pass. Sizes are checked before anything is
// allocated: a length beyond the limit ends the connection, a stream larger than the model limit
// is refused. Model bytes are safetensors (core/safetensors.h). Plain C++; FrameReader and
// ModelAssembler are thread-compatible.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/safetensors.h"
#include "core/status.h"

namespace plexus::gossip {

// The version of what peers say to each other (these frames and the plexus.v1 gossip messages),
// sent in every hello: a peer of another version is refused there, with both versions named,
// instead of misreading frames later. Raise it with any change an older peer would misread.
inline constexpr uint32_t kGossipWireVersion = 1;

enum class FrameType : uint8_t { kMessage = 1, kChunk = 2, kCheckedChunk = 3 };

inline constexpr size_t kFrameHeaderBytes = 4 + 1 + 4 + 4;
// What follows the length prefix apart from the payload: type, stream, index.
inline constexpr size_t kFrameFixedBytes = 1 + 4 + 4;

struct Frame {
  FrameType type = FrameType::kMessage;
  uint32_t stream = 0;
  uint32_t index = 0;
  std::string payload;
};

// The 13 header bytes of a frame carrying `payload_bytes` (a checked chunk's: its bytes and CRC).
std::string EncodeFrameHeader(FrameType type, uint32_t stream, uint32_t index, size_t payload_bytes);
inline constexpr size_t kChunkCrcBytes = 4;
// The trailer of a kCheckedChunk frame whose 13-byte `header` (EncodeFrameHeader with the
// payload size of `bytes` + kChunkCrcBytes) precedes `bytes`: the CRC-32C of what follows the
// length prefix. `pieces`: the chunk's bytes, in order (a stream's prefix and values may both
// lie in one chunk).
std::string CheckedChunkTrailer(std::string_view header, std::initializer_list<std::string_view> pieces);
// The same from the CRC-32C of the chunk's `bytes` bytes: for a chunk sent on several links, its
// bytes read once (Crc32cCombine joins each link's header to them).
std::string CheckedChunkTrailerOfCrc(std::string_view header, uint32_t bytes_crc, size_t bytes);
// A whole kCheckedChunk frame (tests, and what a sender without scatter-gather writes).
std::string EncodeCheckedChunk(uint32_t stream, uint32_t index, std::string_view bytes);
// A whole frame.
std::string EncodeFrame(FrameType type, uint32_t stream, uint32_t index, std::string_view payload);

// A frame seen in place: the payload points into the bytes just read or into the reader's
// buffer, valid during the callback only. A kCheckedChunk is handed over as a kChunk with
// `checked` set, its payload without the CRC, once the CRC matched. A chunk whose body was read
// into the place its placer gave (FrameReader::Placer) has that place as its payload, `placed` set.
struct FrameView {
  FrameType type = FrameType::kMessage;
  uint32_t stream = 0;
  uint32_t index = 0;
  std::string_view payload;
  bool checked = false;
  bool placed = false;
};

// What a link's first four bytes are when another protocol reached (or answered) a peer's port:
// the one place that knows their byte patterns (FrameReader's errors, PeerLinks' answers).
enum class ForeignStart { kNone, kGrpcServer, kGrpcClient, kTls, kHttpRequest, kHttpResponse };
// `first` holds at least four bytes.
ForeignStart RecogniseStart(std::string_view first);

// Whether a FrameReader error names another protocol that reached (or answered) a peer's link, a
// gRPC server, client, TLS or plain HTTP, rather than a malformed frame: a mistaken address.
bool NamesForeignProtocol(std::string_view error);

// Cuts a byte stream into frames. Frames that lie whole in the bytes of one read are handed over
// where they are; a frame split across reads is gathered in the reader's buffer, unless it is a
// chunk its placer gives a place: then its body goes straight there.
class FrameReader {
 public:
  explicit FrameReader(uint32_t max_payload_bytes) : max_payload_(max_payload_bytes) {}
  // Calls `on_frame` for every complete frame in order, until it returns false. InvalidArgument
  // for a length prefix beyond the limit (checked before the payload is buffered) or an unknown
  // frame type, DataLoss for a checked chunk whose CRC-32C does not match its bytes; the reader
  // (and the connection) is then of no further use.
  Status Read(std::string_view bytes, const std::function<bool(const FrameView&)>& on_frame);
  // The same, copying each frame into `out`.
  Status Append(std::string_view bytes, std::vector<Frame>* out);
  // Bytes of a frame received in part (a placed chunk's body not counted).
  size_t buffered() const { return buffer_.size(); }

  // Where the body of a chunk goes (the model it is part of), so that a received model's bytes
  // are copied once, not gathered and then copied again: asked when a chunk's 13-byte header has
  // arrived but not its whole frame, with the body's size (a checked chunk's without its CRC).
  // Returns exactly that many bytes, or an empty span to gather the chunk as usual. The place
  // must stay valid until the chunk is handed over (as a FrameView with `placed` set) or the
  // reader is destroyed; a CRC-32C that fails leaves garbage there and DataLoss from Read.
  using Placer = std::function<std::span<char>(uint32_t stream, uint32_t index, size_t body_bytes)>;
  void set_placer(Placer placer) { placer_ = std::move(placer); }
  // The rest of a placed checked chunk's body, where the caller may read the next bytes itself
  // and then call Placed with their count (the kernel's copy is then the only one); empty when
  // the next bytes go to Read (which also takes the CRC that ends the chunk).
  std::span<char> PlacedTarget() const;
  // REQUIRES: n <= PlacedTarget().size(), and those bytes were written at its start.
  void Placed(size_t n);
  // At most how many bytes the next Read should get: once a chunk was placed, what ends the frame
  // in progress (a placed chunk's CRC, a gathered frame's rest) and the next frame's header, so
  // that every later body can be read into its place rather than into a read buffer (a link
  // then reads frame by frame: two reads per message); unlimited (SIZE_MAX) before.
  size_t ReadLimit() const;

 private:
  struct Placement {
    std::span<char> body;
    size_t got = 0;  // body bytes written so far
    uint32_t stream = 0;
    uint32_t index = 0;
    bool checked = false;
    uint32_t crc = 0;  // of type, stream, index and the body so far (a checked chunk)
    char trailer[4] = {};
    size_t trailer_got = 0;
  };
  Status Check(uint32_t length) const;
  // `header`: a chunk's 13 header bytes, whose frame has not all arrived. Whether its body got a
  // place (then placed_ is set).
  bool TryPlace(std::string_view header);
  // Writes what `bytes` holds of the placed chunk's body and CRC; consumes it from `bytes`.
  // Whether the chunk is complete (the CRC, if any, then compared: DataLoss in `status`).
  bool FillPlacement(std::string_view* bytes, Status* status);
  const uint32_t max_payload_;
  std::string buffer_;
  Placer placer_;
  std::optional<Placement> placed_;
  bool short_reads_ = false;  // a chunk got a place: ReadLimit keeps reads to frame boundaries
};

// Reassembles the chunks of one model stream straight into the model (safetensors, decoded as
// it arrives: the model's bytes are held once): in order, no more than announced, then, for a
// stream announced with one, the SHA-256 of the whole compared with the header's.
class ModelAssembler {
 public:
  // InvalidArgument when `total_bytes` is zero or beyond `max_model_bytes`, or the hash is not 64
  // hex digits. Nothing is allocated before these checks.
  static Result<ModelAssembler> Begin(uint64_t total_bytes, std::string sha256_hex, uint64_t max_model_bytes);
  // A stream without a whole-stream hash: its link vouches for its bytes (TLS records, or the
  // CRC-32C of every chunk). The same size checks.
  static Result<ModelAssembler> BeginUnhashed(uint64_t total_bytes, uint64_t max_model_bytes);
  // InvalidArgument for a chunk out of order, past the announced size, or bytes that are not
  // safetensors.
  Status Add(uint32_t index, std::string_view bytes);
  // Where chunk `index` of `bytes` bytes goes in the model, when it is the chunk due and holds
  // values only (SafetensorsStreamDecoder::Destination); empty otherwise, or for a bytes stream.
  // Add given that very span takes the bytes as they lie.
  std::span<char> Destination(uint32_t index, size_t bytes);
  bool complete() const { return received() == total_; }
  uint64_t total_bytes() const { return total_; }
  // The model once complete; DataLoss when the SHA-256 of the bytes is not the announced one.
  Result<ModelState> Finish() &&;

  // A stream of a codec's bytes (compressed gossip): kept whole, for the codec to decode. The same
  // checks as Begin (an empty hash: unhashed, as BeginUnhashed); Add takes any bytes; FinishBytes
  // returns them once their SHA-256, if announced, checks.
  static Result<ModelAssembler> BeginBytes(uint64_t total_bytes, std::string sha256_hex, uint64_t max_model_bytes);
  bool bytes_stream() const { return bytes_stream_; }
  Result<std::string> FinishBytes() &&;

 private:
  ModelAssembler(uint64_t total, std::string sha) : total_(total), sha_(std::move(sha)), decoder_(total) {}
  uint64_t received() const { return bytes_stream_ ? bytes_.size() : decoder_.received(); }
  uint64_t total_;
  std::string sha_;  // empty: unhashed
  uint32_t next_index_ = 0;
  SafetensorsStreamDecoder decoder_;
  bool bytes_stream_ = false;
  std::string bytes_;  // a bytes stream's bytes
};

}  // namespace plexus::gossip
