// CRC-32C (Castagnoli, the checksum of iSCSI, ext4 metadata and LevelDB's log): a per-frame
// check that a byte stream arrived as it was sent, where nothing stronger already guards it (a
// plaintext peer link; over TLS the record layer authenticates every byte). Not a content hash:
// it catches accidental corruption, not a forger. Uses the CPU's CRC32 instruction where the
// machine has one (x86-64 SSE4.2, chosen at run time; aarch64 when compiled for it), a table
// otherwise (riscv64, old x86). Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace plexus {

// The CRC-32C of `init`'s bytes followed by `bytes`, given `init` = the CRC-32C of the former:
// ExtendCrc32c(Crc32c(a), b) == Crc32c(a + b).
uint32_t ExtendCrc32c(uint32_t init, std::string_view bytes);
inline uint32_t Crc32c(std::string_view bytes) { return ExtendCrc32c(0, bytes); }
// The CRC-32C of a followed by b from their CRCs and b's length, without b's bytes:
// Crc32cCombine(Crc32c(a), Crc32c(b), b.size()) == Crc32c(a + b). So a piece's CRC computed once
// can be joined to many different prefixes (a model's chunk sent on several links, each with its
// own frame header). Costs a table step per 8 KiB of b (32 for a 256 KiB chunk).
uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, size_t length_b);

// The table-driven form every machine runs, whatever its CPU offers (tests compare the two).
uint32_t ExtendCrc32cPortable(uint32_t init, std::string_view bytes);
// Whether ExtendCrc32c uses the CPU's CRC32 instruction on this machine.
bool Crc32cUsesHardware();

}  // namespace plexus
