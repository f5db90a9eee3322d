// CRC-32C (Castagnoli, the checksum of iSCSI, ext4 metadata and LevelDB's log): a per-frame
// check that a byte stream arrived as it was sent, where nothing stronger already guards it (a
// plaintext peer link; over TLS the record layer authenticates every byte). Not a content hash:
// it catches accidental corruption, not a forger. Uses the CPU's CRC32 instruction where the
// machine has one (x86-64 SSE4.2, chosen at run time; aarch64 when compiled for it), a table
// otherwise (riscv64, old x86). Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string_view>

namespace plexus {

// The CRC-32C of `init`'s bytes followed by `bytes`, given `init` = the CRC-32C of the former:
// ExtendCrc32c(Crc32c(a), b) == Crc32c(a + b).
uint32_t ExtendCrc32c(uint32_t init, std::string_view bytes);
inline uint32_t Crc32c(std::string_view bytes) { return ExtendCrc32c(0, bytes); }

// The table-driven form every machine runs, whatever its CPU offers (tests compare the two).
uint32_t ExtendCrc32cPortable(uint32_t init, std::string_view bytes);
// Whether ExtendCrc32c uses the CPU's CRC32 instruction on this machine.
bool Crc32cUsesHardware();

}  // namespace plexus
