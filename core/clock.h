// Clock: the only source of time for engines. RealClock reads a monotonic clock; ManualClock
// moves only when told, so tests and the simulator control time exactly.
// RealClock is thread-safe; ManualClock is thread-compatible.
#pragma once

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
  int64_t NowMs() const override { return now_ms_; }
  void AdvanceMs(int64_t ms) { now_ms_ += ms; }
  // REQUIRES: ms >= NowMs().
  void SetMs(int64_t ms) { now_ms_ = ms; }

 private:
  int64_t now_ms_;
};

}  // namespace plexus
