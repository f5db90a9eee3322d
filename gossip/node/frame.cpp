#include "gossip/node/frame.h"

#include <cstring>

#include "core/model_state.h"

namespace plexus::gossip {
namespace {

void PutU32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
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

Status FrameReader::Append(std::string_view bytes, std::vector<Frame>* out) {
  buffer_.append(bytes);
  size_t pos = 0;
  Status status = Status::Ok();
  while (buffer_.size() - pos >= 4) {
    const uint32_t length = GetU32(buffer_.data() + pos);
    if (length < kFrameFixedBytes || length - kFrameFixedBytes > max_payload_) {
      status = InvalidArgumentError("frame length " + std::to_string(length) + " outside [" +
                                    std::to_string(kFrameFixedBytes) + ", " +
                                    std::to_string(kFrameFixedBytes + max_payload_) + "]");
      break;
    }
    if (buffer_.size() - pos < 4 + static_cast<size_t>(length)) break;
    const char* p = buffer_.data() + pos + 4;
    const auto type = static_cast<uint8_t>(p[0]);
    if (type != static_cast<uint8_t>(FrameType::kMessage) && type != static_cast<uint8_t>(FrameType::kChunk)) {
      status = InvalidArgumentError("unknown frame type " + std::to_string(type));
      break;
    }
    Frame f;
    f.type = static_cast<FrameType>(type);
    f.stream = GetU32(p + 1);
    f.index = GetU32(p + 5);
    f.payload.assign(p + kFrameFixedBytes, length - kFrameFixedBytes);
    out->push_back(std::move(f));
    pos += 4 + static_cast<size_t>(length);
  }
  buffer_.erase(0, pos);
  if (!status.ok()) buffer_.clear();
  return status;
}

Result<ModelAssembler> ModelAssembler::Begin(uint64_t total_bytes, std::string sha256_hex, uint64_t max_model_bytes) {
  if (total_bytes == 0 || total_bytes > max_model_bytes) {
    return InvalidArgumentError("model stream of " + std::to_string(total_bytes) + " bytes outside [1, " +
                                std::to_string(max_model_bytes) + "]");
  }
  if (sha256_hex.size() != 64 || sha256_hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return InvalidArgumentError("model stream without a SHA-256 (64 lower-case hex digits)");
  }
  return ModelAssembler(total_bytes, std::move(sha256_hex));
}

Status ModelAssembler::Add(uint32_t index, std::string_view bytes) {
  if (index != next_index_) {
    return InvalidArgumentError("chunk " + std::to_string(index) + " where " + std::to_string(next_index_) +
                                " was due");
  }
  if (bytes.size() > total_ - bytes_.size()) {
    return InvalidArgumentError("chunks past the announced " + std::to_string(total_) + " bytes");
  }
  if (bytes_.empty()) bytes_.reserve(total_);
  bytes_.append(bytes);
  ++next_index_;
  return Status::Ok();
}

Result<std::string> ModelAssembler::Finish() && {
  if (!complete()) return InvalidArgumentError("model stream incomplete");
  if (Sha256Hex(bytes_) != sha_) return DataLossError("model stream's SHA-256 differs from its header's");
  return std::move(bytes_);
}

}  // namespace plexus::gossip
