// CRC-32C (Castagnoli, the checksum of iSCSI, ext4 metadata and LevelDB's log): a per-frame
// check that a byte stream arrived as it was sent, where nothing stronger already guards it (a
// plaintext peer link; over TLS the record layer authenticates every byte). Not a content hash:
// it catches accidental corruption, not a forger. Uses carry-less multiplication or the CPU's
// CRC32 instruction where the machine has them (chosen at run time on x86-64; aarch64 when
// compiled for it), a table otherwise (riscv64, old x86). Pure functions; thread-safe.
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

// The ways this build computes it, the same bits each: a table (every machine), the CPU's CRC32
// instruction over three streams at once (x86-64 with SSE4.2, aarch64 built with CRC), and
// folding 256 bytes at a time by carry-less multiplication (x86-64 with AVX-512 and VPCLMULQDQ;
// under 512 bytes, and for the tail, it takes the instruction). ExtendCrc32c takes the fastest the
// CPU runs; tests ask for each (a path the CPU cannot run falls back to the next slower one).
enum class Crc32cPath { kTable, kInstruction, kFolding };
bool Crc32cRunsOnThisCpu(Crc32cPath path);
uint32_t ExtendCrc32c(Crc32cPath path, uint32_t init, std::string_view bytes);

}  // namespace plexus
