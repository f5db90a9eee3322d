// The model streams of a peer's links. OutboundStream: a model going out chunk by chunk, as its
// safetensors bytes (a prefix, the header, then the model's own values: sent straight from the
// model, never copied whole) or a codec's bytes. InboundStream: a model being received, its bytes
// counted against the node's inbound budget as they arrive, never as announced (announcing 1 GiB
// and sending nothing once paused every link for good). Values; thread-compatible (a ChunkCrcs is
// shared by the streams of one model: loop thread only).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/model_state.h"
#include "core/value_bytes.h"
#include "gossip/node/frame.h"
#include "plexus/v1/gossip.pb.h"

namespace plexus::gossip {

// The CRC-32C of each chunk's bytes of one model's stream (not of its frame header): the first
// plaintext link to send a chunk computes it, and every other link sending the same model to
// another neighbour joins its own header's CRC to it (CheckedChunkTrailerOfCrc) instead of reading
// the chunk again. Chunks are cut at the same offsets on every link.
struct ChunkCrcs {
  struct Entry {
    size_t length = 0;  // of the chunk the CRC is for; 0: not computed yet
    uint32_t crc = 0;
  };
  // The CRC of chunk `index` when it was computed for a chunk of `length` bytes.
  std::optional<uint32_t> Get(uint32_t index, size_t length) const {
    if (index < chunks.size() && chunks[index].length == length) return chunks[index].crc;
    return std::nullopt;
  }
  void Put(uint32_t index, size_t length, uint32_t crc) {
    if (chunks.size() <= index) chunks.resize(index + 1);
    chunks[index] = {length, crc};
  }

  std::vector<Entry> chunks;
};

// A model's safetensors prefix and its chunks' CRCs, kept while the model lives: reused for every
// target.
struct EncodedModel {
  std::weak_ptr<const ModelState> model;
  std::shared_ptr<const std::string> prefix;
  std::shared_ptr<ChunkCrcs> crcs;
};

struct OutboundStream {
  std::shared_ptr<const ModelState> model;
  std::shared_ptr<const std::string> prefix;
  uint32_t id = 0;
  size_t offset = 0;
  uint32_t index = 0;
  std::shared_ptr<const std::string> coded;  // compressed gossip: a codec's bytes, sent instead
  std::shared_ptr<ChunkCrcs> crcs;           // shared by the links sending this model; may be null

  size_t size() const { return coded ? coded->size() : prefix->size() + model->num_bytes(); }
  // Bytes [offset, offset + n) of prefix + values (or of the coded bytes), where they lie: the
  // part in the prefix, then the part in the model's values or the coded bytes (either may be
  // empty). Valid while the stream holds its model.
  std::array<std::string_view, 2> Pieces(size_t n) const {
    if (coded) return {std::string_view(), std::string_view(*coded).substr(offset, n)};
    const std::string_view values = ValueBytes(*model);
    size_t at = offset;
    std::string_view head;
    if (at < prefix->size()) {
      const size_t k = std::min(n, prefix->size() - at);
      head = std::string_view(*prefix).substr(at, k);
      at += k;
      n -= k;
    }
    return {head, values.substr(at - prefix->size(), n)};
  }
  // What keeps the bytes of the second piece alive.
  std::shared_ptr<const void> body_owner() const {
    return coded ? std::shared_ptr<const void>(coded) : std::shared_ptr<const void>(model);
  }
};

struct InboundStream {
  v1::GossipModel header;
  ModelAssembler assembler;
  uint64_t received = 0;        // payload bytes so far, counted in the node's inbound budget
  double last_progress_ms = 0;  // the last chunk, the announcement, or the node's resume of the link
};

}  // namespace plexus::gossip
