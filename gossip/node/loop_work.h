// LoopWork: how a libuv loop's owner runs work off the loop and gets results back on it. OffLoop
// runs `work` on one of libuv's worker threads, then `done` on the loop thread; Post hands a
// function from any thread to the loop (through a uv_async_t), for a worker that must ask the
// loop something while it runs. The loop keeps running while an OffLoop job is queued, and
// while the wake handle is open; Close closes it (the owner does so when it leaves, after every
// job that may Post has finished). Borrows the loop. OffLoop and Close: loop thread only; Post:
// any thread, until Close.
#pragma once

#include <uv.h>

#include <deque>
#include <functional>
#include <mutex>

namespace plexus::gossip {

class LoopWork {
 public:
  explicit LoopWork(uv_loop_t* loop);
  LoopWork(const LoopWork&) = delete;
  LoopWork& operator=(const LoopWork&) = delete;

  // What the two share they capture (shared_ptrs); `work` must not touch the loop's state.
  void OffLoop(std::function<void()> work, std::function<void()> done);
  void Post(std::function<void()> f);
  void Close();

 private:
  void RunMailbox();

  uv_loop_t* const loop_;
  uv_async_t wake_;
  std::mutex mu_;
  std::deque<std::function<void()>> mailbox_;  // guarded by mu_
};

}  // namespace plexus::gossip
