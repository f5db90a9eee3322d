#include "core/large_blocks.h"

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <unordered_map>
#include <utility>

#include "core/large_block_source.h"

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
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

constexpr size_t kHugePage = size_t{2} << 20;

// Huge pages only cover whole, aligned 2 MiB ranges: a block of 2 MiB and more starts on such a
// boundary and its mapping runs to the next one, so that a 4 MB model (3.8 MiB) takes two faults
// instead of a thousand: a mapping that stopped at the model's last byte left its last 1.8 MiB
// to 465 small pages. Each fault, on a virtual machine, costs a trip to the hypervisor; the
// price is at most one partly used huge page per block.
size_t MappedLength(size_t bytes) { return bytes >= kHugePage ? (bytes + kHugePage - 1) & ~(kHugePage - 1) : bytes; }

void* MapFresh(size_t requested) {
#if defined(__linux__)
  const size_t bytes = MappedLength(requested);
  const size_t slack = bytes >= kHugePage ? kHugePage : 0;  // room to align the start
  char* mapped =
      static_cast<char*>(mmap(nullptr, bytes + slack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (mapped == MAP_FAILED) throw std::bad_alloc();
  char* p = mapped;
  if (slack > 0) {
    p = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(mapped) + kHugePage - 1) & ~(kHugePage - 1));
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    auto page_end = [page](const char* at) {
      return reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(at) + page - 1) & ~(page - 1));
    };
    if (p > mapped) munmap(mapped, static_cast<size_t>(p - mapped));
    char* const used_end = page_end(p + bytes);
    char* const mapped_end = page_end(mapped + bytes + slack);
    if (mapped_end > used_end) munmap(used_end, static_cast<size_t>(mapped_end - used_end));
  }
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
  munmap(p, MappedLength(bytes));
#else
  (void)bytes;
  ::operator delete(p);
#endif
}

// Which source each block taken from a source belongs to, so that freeing it gives it back there.
struct SourcedBlocks {
  std::mutex mu;
  std::unordered_map<void*, std::shared_ptr<LargeBlockSource>> owner;  // guarded by mu
  std::atomic<size_t> count{0};  // owner.size(): read without the lock on every free
};

SourcedBlocks& TheSourcedBlocks() {
  static SourcedBlocks* blocks = new SourcedBlocks;  // never destroyed, as the cache
  return *blocks;
}

thread_local std::shared_ptr<LargeBlockSource> routed_source;

}  // namespace

ScopedLargeBlockSource::ScopedLargeBlockSource(std::shared_ptr<LargeBlockSource> source) {
  if (!source) return;
  routed_ = true;
  previous_ = std::exchange(routed_source, std::move(source));
}

ScopedLargeBlockSource::~ScopedLargeBlockSource() {
  if (routed_) routed_source = std::move(previous_);
}

size_t LargeBlocksFromSources() { return TheSourcedBlocks().count.load(std::memory_order_relaxed); }

void* AllocateLargeBlock(size_t bytes) {
  if (routed_source) {
    if (void* p = routed_source->Take(bytes)) {
      SourcedBlocks& s = TheSourcedBlocks();
      std::lock_guard<std::mutex> lock(s.mu);
      s.owner.emplace(p, routed_source);
      s.count.store(s.owner.size(), std::memory_order_relaxed);
      return p;
    }
  }
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
  if (SourcedBlocks& s = TheSourcedBlocks(); s.count.load(std::memory_order_relaxed) > 0) {
    std::shared_ptr<LargeBlockSource> source;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      if (auto it = s.owner.find(p); it != s.owner.end()) {
        source = std::move(it->second);
        s.owner.erase(it);
        s.count.store(s.owner.size(), std::memory_order_relaxed);
      }
    }
    if (source) return source->GiveBack(p, bytes);
  }
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
