// Fixed-width unsigned integers as little-endian bytes, the byte order of the project's file and
// frame headers (gossip frames, the store's state files), whatever the host's order. Stateless.
#pragma once

#include <cstddef>
#include <cstdint>

namespace plexus {

// Writes the low `bytes` bytes of `v` (at most 8) to out[0..bytes), least significant first.
inline void PutLittleEndian(uint64_t v, size_t bytes, char* out) {
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

// The value of in[0..bytes) (at most 8), least significant byte first.
inline uint64_t GetLittleEndian(const char* in, size_t bytes) {
  uint64_t v = 0;
  for (size_t i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  return v;
}

}  // namespace plexus
