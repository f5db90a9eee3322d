// LoopWork: how a libuv loop's owner runs work off the loop and gets results back on it. OffLoop
// runs `work` on one of libuv's worker threads, then `done` on the loop thread; the loop keeps
// running while a job is queued. Nothing run this way may wait on the loop (a worker blocked there
// would hold one of libuv's few workers from decoding and training): work that needs answers
// from the network is a state machine the loop drives (CrdtPulls). Borrows the loop. Loop thread
// only.
#pragma once

#include <uv.h>

#include <functional>

namespace plexus::gossip {

class LoopWork {
 public:
  explicit LoopWork(uv_loop_t* loop) : loop_(loop) {}
  LoopWork(const LoopWork&) = delete;
  LoopWork& operator=(const LoopWork&) = delete;

  // What the two share they capture (shared_ptrs); `work` must not touch the loop's state.
  void OffLoop(std::function<void()> work, std::function<void()> done);

 private:
  uv_loop_t* const loop_;
};

}  // namespace plexus::gossip
