// LoopWork: how a libuv loop's owner runs work off the loop and gets results back on it. OffLoop
// runs `work` on one of libuv's worker threads, then `done` on the loop thread; OnOwnThread does
// the same on a thread of its own, for work that waits on the loop (a worker blocked there would
// hold one of libuv's few workers from decoding and training); Post hands a
// function from any thread to the loop (through a uv_async_t), for a worker that must ask the
// loop something while it runs. The loop keeps running while an OffLoop job is queued, and
// while the wake handle is open; Close closes it (the owner does so when it leaves, after every
// job that may Post has finished). Borrows the loop. OffLoop, OnOwnThread and Close: loop thread
// only; Post: any thread, until Close.
#pragma once

#include <uv.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

namespace plexus::gossip {

class LoopWork {
 public:
  explicit LoopWork(uv_loop_t* loop);
  ~LoopWork();
  LoopWork(const LoopWork&) = delete;
  LoopWork& operator=(const LoopWork&) = delete;

  // What the two share they capture (shared_ptrs); `work` must not touch the loop's state.
  void OffLoop(std::function<void()> work, std::function<void()> done);
  void OnOwnThread(std::function<void()> work, std::function<void()> done);
  void Post(std::function<void()> f);
  void Close();

 private:
  void RunMailbox();

  uv_loop_t* const loop_;
  uv_async_t wake_;
  std::mutex mu_;
  std::deque<std::function<void()>> mailbox_;  // guarded by mu_
  std::map<uint64_t, std::thread> threads_;    // OnOwnThread's, joined when their `done` runs
  uint64_t next_thread_ = 0;
};

}  // namespace plexus::gossip
