// ThreadPool: a fixed set of worker threads for data-parallel loops over parameter ranges.
// ParallelFor splits [0, n) into contiguous ranges, one per worker (the caller's thread takes
// one), and returns when all are done. The ranges depend only on n and the thread count, so
// results are reproducible. Thread-safe; ParallelFor calls from different threads serialize.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace plexus {

class ThreadPool {
 public:
  // threads >= 1; 1 means everything runs on the caller's thread.
  explicit ThreadPool(size_t threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return workers_.size() + 1; }

  // Calls fn(begin, end) on disjoint ranges covering [0, n). Ranges smaller than min_chunk
  // are not split further.
  void ParallelFor(size_t n, const std::function<void(size_t, size_t)>& fn, size_t min_chunk = 1 << 14);

 private:
  void WorkerLoop(size_t index);

  std::vector<std::thread> workers_;
  std::mutex call_mu_;  // serializes ParallelFor calls
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  const std::function<void(size_t, size_t)>* job_ = nullptr;  // guarded by mu_
  std::vector<std::pair<size_t, size_t>> ranges_;             // guarded by mu_
  uint64_t generation_ = 0;                                   // guarded by mu_
  size_t pending_ = 0;                                        // guarded by mu_
  bool stop_ = false;                                         // guarded by mu_
};

}  // namespace plexus
