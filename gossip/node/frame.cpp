#include "gossip/node/frame.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/crc32c.h"
#include "core/little_endian.h"
#include "core/model_state.h"

namespace plexus::gossip {
namespace {

void PutU32(char* p, uint32_t v) { PutLittleEndian(v, 4, p); }
uint32_t GetU32(const char* p) { return static_cast<uint32_t>(GetLittleEndian(p, 4)); }

Status CrcMismatch(uint32_t stream, uint32_t index) {
  return DataLossError("chunk " + std::to_string(index) + " of model stream " + std::to_string(stream) +
                       " fails its CRC-32C: its bytes were altered in flight");
}

}  // namespace

std::string EncodeFrameHeader(FrameType type, uint32_t stream, uint32_t index, size_t payload_bytes) {
  std::string h(kFrameHeaderBytes, '\0');
  PutU32(h.data(), static_cast<uint32_t>(kFrameFixedBytes + payload_bytes));
  h[4] = static_cast<char>(type);
  PutU32(h.data() + 5, stream);
  PutU32(h.data() + 9, index);
  return h;
}

std::string EncodeFrame(FrameType type, uint32_t stream, uint32_t index, std::string_view payload) {
  std::string f = EncodeFrameHeader(type, stream, index, payload.size());
  f.append(payload);
  return f;
}

std::string CheckedChunkTrailer(std::string_view header, std::initializer_list<std::string_view> pieces) {
  uint32_t crc = Crc32c(header.substr(4));
  for (std::string_view piece : pieces) crc = ExtendCrc32c(crc, piece);
  std::string trailer(kChunkCrcBytes, '\0');
  PutU32(trailer.data(), crc);
  return trailer;
}

std::string CheckedChunkTrailerOfCrc(std::string_view header, uint32_t bytes_crc, size_t bytes) {
  std::string trailer(kChunkCrcBytes, '\0');
  PutU32(trailer.data(), Crc32cCombine(Crc32c(header.substr(4)), bytes_crc, bytes));
  return trailer;
}

std::string EncodeCheckedChunk(uint32_t stream, uint32_t index, std::string_view bytes) {
  std::string f = EncodeFrameHeader(FrameType::kCheckedChunk, stream, index, bytes.size() + kChunkCrcBytes);
  const std::string trailer = CheckedChunkTrailer(f, {bytes});
  f.append(bytes);
  f.append(trailer);
  return f;
}

constexpr std::string_view kForeignServer =
    "the other side answered in HTTP/2 (gRPC): that address is a plexus server's, not a plexus peer's";
constexpr std::string_view kForeignClient = "a gRPC client (plexus client, or plexus status --server) reached";
constexpr std::string_view kForeignTls = "the other side speaks TLS and this link does not";
constexpr std::string_view kForeignHttp = "plain HTTP reached a plexus peer's port";

static ForeignStart StartOf(uint32_t prefix) {  // the four bytes read as a little-endian length
  // A gRPC server's first bytes: an HTTP/2 SETTINGS frame (length 00 00 LL, type 04).
  if ((prefix & 0xff00ffffU) == 0x04000000U) return ForeignStart::kGrpcServer;
  if (prefix == 0x20495250U) return ForeignStart::kGrpcClient;  // "PRI ": the HTTP/2 client preface
  // A TLS record: handshake, version 3.x.
  if ((prefix & 0x0000ffffU) == 0x00000316U) return ForeignStart::kTls;
  // "GET ", "POST", "HEAD", "PUT "
  if (prefix == 0x20544547U || prefix == 0x54534f50U || prefix == 0x44414548U || prefix == 0x20545550U) {
    return ForeignStart::kHttpRequest;
  }
  if (prefix == 0x50545448U) return ForeignStart::kHttpResponse;  // "HTTP"
  return ForeignStart::kNone;
}

ForeignStart RecogniseStart(std::string_view first) { return StartOf(GetU32(first.data())); }

// What else a peer's first four bytes may be, read as a length prefix: another protocol reached
// (or answered) a plexus peer port. Empty when they look like nothing known.
std::string ForeignProtocol(uint32_t prefix) {
  switch (StartOf(prefix)) {
    case ForeignStart::kGrpcServer:
      return std::string(kForeignServer) +
             " (--peers takes other peers' addresses; plexus peer --server takes a server's)";
    case ForeignStart::kGrpcClient:
      return std::string(kForeignClient) +
             " this plexus peer's port: it needs a plexus server's address (plexus status --peer asks a peer)";
    case ForeignStart::kTls:
      return std::string(kForeignTls) + ": give both sides the same --tls-* flags";
    case ForeignStart::kHttpRequest:
    case ForeignStart::kHttpResponse:
      return std::string(kForeignHttp) + ", which speaks only the peers' own protocol";
    case ForeignStart::kNone:
      break;
  }
  return "";
}

bool NamesForeignProtocol(std::string_view error) {
  for (std::string_view known : {kForeignServer, kForeignClient, kForeignTls, kForeignHttp}) {
    if (error.substr(0, known.size()) == known) return true;
  }
  return false;
}

Status FrameReader::Check(uint32_t length) const {
  if (length < kFrameFixedBytes || length - kFrameFixedBytes > max_payload_) {
    if (std::string foreign = ForeignProtocol(length); !foreign.empty()) return InvalidArgumentError(foreign);
    return InvalidArgumentError("frame length " + std::to_string(length) + " outside [" +
                                std::to_string(kFrameFixedBytes) + ", " +
                                std::to_string(kFrameFixedBytes + max_payload_) + "]");
  }
  return Status::Ok();
}

Status FrameReader::Read(std::string_view bytes, const std::function<bool(const FrameView&)>& on_frame) {
  // `frame`: the bytes after a length prefix. False when the callback asked to stop.
  Status status = Status::Ok();
  auto emit = [&](std::string_view frame) {
    const auto type = static_cast<uint8_t>(frame[0]);
    FrameView v{static_cast<FrameType>(type), GetU32(frame.data() + 1), GetU32(frame.data() + 5),
                frame.substr(kFrameFixedBytes)};
    if (v.type == FrameType::kCheckedChunk) {
      if (v.payload.size() < kChunkCrcBytes) {
        status = InvalidArgumentError("a checked chunk too short for its CRC-32C");
        return false;
      }
      const std::string_view body = frame.substr(0, frame.size() - kChunkCrcBytes);
      if (Crc32c(body) != GetU32(frame.data() + body.size())) {
        status = CrcMismatch(v.stream, v.index);
        return false;
      }
      v.type = FrameType::kChunk;
      v.payload.remove_suffix(kChunkCrcBytes);
      v.checked = true;
    } else if (v.type != FrameType::kMessage && v.type != FrameType::kChunk) {
      status = InvalidArgumentError("unknown frame type " + std::to_string(type));
      return false;
    }
    return on_frame(v);
  };
  while (true) {
    if (placed_) {
      if (!FillPlacement(&bytes, &status)) return status;
      const Placement p = *placed_;
      placed_.reset();
      if (!on_frame(FrameView{FrameType::kChunk, p.stream, p.index, std::string_view(p.body.data(), p.body.size()),
                              p.checked, true})) {
        return status;
      }
      continue;
    }
    if (!buffer_.empty()) {
      // Finish the frame that began in an earlier read: its header first, which may give its
      // body a place.
      while (buffer_.size() < 4 && !bytes.empty()) {
        buffer_.push_back(bytes.front());
        bytes.remove_prefix(1);
      }
      if (buffer_.size() < 4) return Status::Ok();
      const uint32_t length = GetU32(buffer_.data());
      if (Status s = Check(length); !s.ok()) {
        buffer_.clear();
        return s;
      }
      if (buffer_.size() < kFrameHeaderBytes) {
        const size_t take = std::min(kFrameHeaderBytes - buffer_.size(), bytes.size());
        buffer_.append(bytes.substr(0, take));
        bytes.remove_prefix(take);
        if (buffer_.size() < kFrameHeaderBytes) return Status::Ok();
        if (TryPlace(buffer_)) {
          buffer_.clear();
          continue;
        }
      }
      const size_t take = std::min(4 + static_cast<size_t>(length) - buffer_.size(), bytes.size());
      buffer_.append(bytes.substr(0, take));
      bytes.remove_prefix(take);
      if (buffer_.size() < 4 + static_cast<size_t>(length)) return Status::Ok();
      const std::string frame = std::move(buffer_);
      buffer_.clear();
      if (!emit(std::string_view(frame).substr(4))) return status;
      continue;
    }
    if (bytes.size() < 4) break;
    const uint32_t length = GetU32(bytes.data());
    if (Status s = Check(length); !s.ok()) return s;
    if (bytes.size() >= 4 + static_cast<size_t>(length)) {
      if (!emit(bytes.substr(4, length))) return status;
      bytes.remove_prefix(4 + static_cast<size_t>(length));
      continue;
    }
    if (bytes.size() >= kFrameHeaderBytes && TryPlace(bytes.substr(0, kFrameHeaderBytes))) {
      bytes.remove_prefix(kFrameHeaderBytes);
      continue;
    }
    break;
  }
  buffer_.assign(bytes);
  return Status::Ok();
}

bool FrameReader::TryPlace(std::string_view header) {
  const auto type = static_cast<FrameType>(header[4]);
  if (!placer_ || (type != FrameType::kChunk && type != FrameType::kCheckedChunk)) return false;
  const bool checked = type == FrameType::kCheckedChunk;
  const size_t payload = GetU32(header.data()) - kFrameFixedBytes;
  // No body to place (a checked chunk too short for its CRC is refused once it is whole).
  if (payload <= (checked ? kChunkCrcBytes : 0)) return false;
  const size_t body = checked ? payload - kChunkCrcBytes : payload;
  const uint32_t stream = GetU32(header.data() + 5);
  const uint32_t index = GetU32(header.data() + 9);
  const std::span<char> place = placer_(stream, index, body);
  if (place.size() != body) return false;
  placed_ = Placement{place, 0, stream, index, checked, checked ? Crc32c(header.substr(4)) : 0};
  short_reads_ = true;
  return true;
}

bool FrameReader::FillPlacement(std::string_view* bytes, Status* status) {
  Placement& p = *placed_;
  const size_t body = std::min(p.body.size() - p.got, bytes->size());
  if (body > 0) {
    std::memcpy(p.body.data() + p.got, bytes->data(), body);
    Placed(body);
    bytes->remove_prefix(body);
  }
  if (p.got < p.body.size()) return false;
  if (!p.checked) return true;
  const size_t trailer = std::min(kChunkCrcBytes - p.trailer_got, bytes->size());
  if (trailer > 0) std::memcpy(p.trailer + p.trailer_got, bytes->data(), trailer);
  p.trailer_got += trailer;
  bytes->remove_prefix(trailer);
  if (p.trailer_got < kChunkCrcBytes) return false;
  if (p.crc != GetU32(p.trailer)) {
    *status = CrcMismatch(p.stream, p.index);
    placed_.reset();
    return false;
  }
  return true;
}

std::span<char> FrameReader::PlacedTarget() const {
  // Only a checked chunk's body: its CRC, which Read takes, then hands it over. (An unchecked
  // one, TLS's, is placed by Read as it copies the decrypted bytes.)
  if (!placed_ || !placed_->checked || placed_->got == placed_->body.size()) return {};
  return placed_->body.subspan(placed_->got);
}

void FrameReader::Placed(size_t n) {
  Placement& p = *placed_;
  if (p.checked) p.crc = ExtendCrc32c(p.crc, std::string_view(p.body.data() + p.got, n));
  p.got += n;
}

size_t FrameReader::ReadLimit() const {
  if (placed_) {
    return (placed_->body.size() - placed_->got) + (placed_->checked ? kChunkCrcBytes - placed_->trailer_got : 0) +
           kFrameHeaderBytes;
  }
  if (!short_reads_) return SIZE_MAX;
  if (buffer_.size() < kFrameHeaderBytes) return kFrameHeaderBytes - buffer_.size();
  // A frame being gathered (a message, a stream's first chunk): its rest and the next header.
  return 4 + static_cast<size_t>(GetU32(buffer_.data())) - buffer_.size() + kFrameHeaderBytes;
}

Status FrameReader::Append(std::string_view bytes, std::vector<Frame>* out) {
  return Read(bytes, [out](const FrameView& v) {
    out->push_back({v.type, v.stream, v.index, std::string(v.payload)});
    return true;
  });
}

Result<ModelAssembler> ModelAssembler::BeginUnhashed(uint64_t total_bytes, uint64_t max_model_bytes) {
  if (total_bytes == 0 || total_bytes > max_model_bytes) {
    return InvalidArgumentError("model stream of " + std::to_string(total_bytes) + " bytes outside [1, " +
                                std::to_string(max_model_bytes) + "]");
  }
  return ModelAssembler(total_bytes, "");
}

Result<ModelAssembler> ModelAssembler::Begin(uint64_t total_bytes, std::string sha256_hex, uint64_t max_model_bytes) {
  PLEXUS_ASSIGN_OR_RETURN(ModelAssembler a, BeginUnhashed(total_bytes, max_model_bytes));
  if (sha256_hex.size() != 64 || sha256_hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return InvalidArgumentError("model stream without a SHA-256 (64 lower-case hex digits)");
  }
  a.sha_ = std::move(sha256_hex);
  return a;
}

Status ModelAssembler::Add(uint32_t index, std::string_view bytes) {
  if (index != next_index_) {
    return InvalidArgumentError("chunk " + std::to_string(index) + " where " + std::to_string(next_index_) +
                                " was due");
  }
  if (bytes.size() > total_ - received()) {
    return InvalidArgumentError("chunks past the announced " + std::to_string(total_) + " bytes");
  }
  if (bytes_stream_) {
    bytes_.append(bytes);
  } else {
    PLEXUS_RETURN_IF_ERROR(decoder_.Append(bytes));
  }
  ++next_index_;
  return Status::Ok();
}

std::span<char> ModelAssembler::Destination(uint32_t index, size_t bytes) {
  if (bytes_stream_ || index != next_index_) return {};
  return decoder_.Destination(bytes);
}

Result<ModelAssembler> ModelAssembler::BeginBytes(uint64_t total_bytes, std::string sha256_hex,
                                                  uint64_t max_model_bytes) {
  PLEXUS_ASSIGN_OR_RETURN(ModelAssembler a, sha256_hex.empty()
                                                ? BeginUnhashed(total_bytes, max_model_bytes)
                                                : Begin(total_bytes, std::move(sha256_hex), max_model_bytes));
  a.bytes_stream_ = true;
  return a;
}

Result<std::string> ModelAssembler::FinishBytes() && {
  if (!bytes_stream_ || !complete()) return InvalidArgumentError("byte stream incomplete");
  if (!sha_.empty() && Sha256Hex(bytes_) != sha_)
    return DataLossError("byte stream's SHA-256 differs from its header's");
  return std::move(bytes_);
}

Result<ModelState> ModelAssembler::Finish() && {
  if (bytes_stream_) return InvalidArgumentError("a byte stream is not a model");
  if (!complete()) return InvalidArgumentError("model stream incomplete");
  if (!sha_.empty() && decoder_.ReceivedSha256() != sha_)
    return DataLossError("model stream's SHA-256 differs from its header's");
  return std::move(decoder_).Finish();
}

}  // namespace plexus::gossip
