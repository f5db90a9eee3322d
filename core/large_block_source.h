// LargeBlockSource: memory for large blocks (core/large_blocks.h) that is something else as well,
// such as a store's update files mapped into memory, so that an upload decoded there is already
// in the file that logs it. While a ScopedLargeBlockSource is alive on a thread, every
// AllocateLargeBlock on that thread asks its source first (the heap serves what the source
// declines); a block a source gave goes back to that source through FreeLargeBlock, on any
// thread and also after the scope has ended. The blocks hold a reference to their source, so a
// source lives until its last block is freed. Thread-safe.
#pragma once

#include <cstddef>
#include <memory>

namespace plexus {

class LargeBlockSource {
 public:
  virtual ~LargeBlockSource() = default;
  // A block of exactly `bytes` bytes, or nullptr to let the heap serve. Thread-safe.
  virtual void* Take(size_t bytes) = 0;
  // REQUIRES: p came from Take(bytes) and was not given back since. Thread-safe.
  virtual void GiveBack(void* p, size_t bytes) = 0;
};

// Routes this thread's large allocations to `source` (null: no change) until destroyed, then
// restores the source that was routed before. Not movable: a scope on the stack.
class ScopedLargeBlockSource {
 public:
  explicit ScopedLargeBlockSource(std::shared_ptr<LargeBlockSource> source);
  ~ScopedLargeBlockSource();
  ScopedLargeBlockSource(const ScopedLargeBlockSource&) = delete;
  ScopedLargeBlockSource& operator=(const ScopedLargeBlockSource&) = delete;

 private:
  bool routed_ = false;
  std::shared_ptr<LargeBlockSource> previous_;
};

// Blocks taken from sources and not yet freed, over all sources (tests).
size_t LargeBlocksFromSources();

}  // namespace plexus
