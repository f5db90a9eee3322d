// Large blocks: where model-sized buffers (kLargeBlockBytes and up) get their memory. A freed
// block is kept, a few at a time, and handed out again for a request of the same size, so that a
// server taking update after update of one model reuses memory it has already touched instead of
// asking the kernel for fresh pages each time (a 40 MB update otherwise costs 10,000 page faults,
// each zeroing a page, which on a virtual machine costs more than receiving the update). New
// blocks ask for transparent huge pages where Linux offers them. At most kMaxCachedBlocks blocks
// and kMaxCachedBytes bytes are kept; the oldest goes first. Thread-safe.
#pragma once
#include <cstddef>

namespace plexus {

inline constexpr size_t kLargeBlockBytes = size_t{1} << 20;
inline constexpr size_t kMaxCachedBlocks = 16;
inline constexpr size_t kMaxCachedBytes = size_t{1} << 30;

// REQUIRES: bytes >= kLargeBlockBytes. Throws std::bad_alloc when memory is exhausted, as
// operator new does (this serves a standard allocator).
void* AllocateLargeBlock(size_t bytes);
// REQUIRES: p came from AllocateLargeBlock(bytes).
void FreeLargeBlock(void* p, size_t bytes);
// Blocks and bytes kept for reuse now (for tests and memory reports).
size_t CachedLargeBlocks();
size_t CachedLargeBlockBytes();

}  // namespace plexus
