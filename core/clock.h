// Clock: the only source of time for engines. RealClock reads a monotonic clock; ManualClock
// moves only when told, so tests and the simulator control time exactly.
// Both are thread-safe: a test may move a ManualClock while a server's threads read it.
#pragma once

#include <atomic>
#include <cstdint>

namespace plexus {

class Clock {
 public:
  virtual ~Clock() = default;
  // Milliseconds since an arbitrary, fixed origin; never decreases.
  virtual int64_t NowMs() const = 0;
};

class RealClock final : public Clock {
 public:
  int64_t NowMs() const override;
};

class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t start_ms = 0) : now_ms_(start_ms) {}
  int64_t NowMs() const override { return now_ms_.load(std::memory_order_relaxed); }
  void AdvanceMs(int64_t ms) { now_ms_.fetch_add(ms, std::memory_order_relaxed); }
  // REQUIRES: ms >= NowMs().
  void SetMs(int64_t ms) { now_ms_.store(ms, std::memory_order_relaxed); }

 private:
  // Relaxed: the time is the only thing a reader learns from it.
  std::atomic<int64_t> now_ms_;
};

}  // namespace plexus
