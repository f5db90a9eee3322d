#include "core/large_blocks.h"

#include <deque>
#include <mutex>
#include <new>
#include <utility>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace plexus {
namespace {

struct Cache {
  std::mutex mu;
  std::deque<std::pair<void*, size_t>> blocks;  // guarded by mu; oldest first
  size_t bytes = 0;                             // guarded by mu
};

Cache& TheCache() {
  static Cache* cache = new Cache;  // never destroyed: blocks may be freed during static destruction
  return *cache;
}

void* MapFresh(size_t bytes) {
#if defined(__linux__)
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  madvise(p, bytes, MADV_HUGEPAGE);  // advice only: a kernel without THP ignores it
#endif
  return p;
#else
  return ::operator new(bytes);
#endif
}

void Unmap(void* p, size_t bytes) {
#if defined(__linux__)
  munmap(p, bytes);
#else
  (void)bytes;
  ::operator delete(p);
#endif
}

}  // namespace

void* AllocateLargeBlock(size_t bytes) {
  Cache& c = TheCache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    for (auto it = c.blocks.rbegin(); it != c.blocks.rend(); ++it) {
      if (it->second != bytes) continue;
      void* p = it->first;
      c.blocks.erase(std::next(it).base());
      c.bytes -= bytes;
      return p;
    }
  }
  return MapFresh(bytes);
}

void FreeLargeBlock(void* p, size_t bytes) {
  Cache& c = TheCache();
  std::deque<std::pair<void*, size_t>> evicted;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    c.blocks.emplace_back(p, bytes);
    c.bytes += bytes;
    while (c.blocks.size() > kMaxCachedBlocks || c.bytes > kMaxCachedBytes) {
      evicted.push_back(c.blocks.front());
      c.bytes -= c.blocks.front().second;
      c.blocks.pop_front();
    }
  }
  for (const auto& [block, size] : evicted) Unmap(block, size);
}

size_t CachedLargeBlocks() {
  Cache& c = TheCache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.blocks.size();
}

size_t CachedLargeBlockBytes() {
  Cache& c = TheCache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.bytes;
}

}  // namespace plexus
