#include "core/thread_pool.h"

#include <algorithm>

namespace plexus {

ThreadPool::ThreadPool(size_t threads) {
  const size_t extra = threads > 1 ? threads - 1 : 0;
  for (size_t i = 0; i < extra; ++i) workers_.emplace_back([this, i] { WorkerLoop(i + 1); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::ParallelFor(size_t n, const std::function<void(size_t, size_t)>& fn, size_t min_chunk) {
  if (n == 0) return;
  const size_t parts = std::max<size_t>(1, std::min(size(), (n + min_chunk - 1) / std::max<size_t>(min_chunk, 1)));
  if (parts == 1) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mu_);
  std::vector<std::pair<size_t, size_t>> ranges(parts);
  for (size_t p = 0; p < parts; ++p) ranges[p] = {n * p / parts, n * (p + 1) / parts};
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    ranges_ = ranges;
    pending_ = parts - 1;
    ++generation_;
  }
  work_cv_.notify_all();
  fn(ranges[0].first, ranges[0].second);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::WorkerLoop(size_t index) {
  uint64_t seen = 0;
  while (true) {
    std::unique_lock<std::mutex> lock(mu_);
    work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    if (index >= ranges_.size()) continue;
    const auto range = ranges_[index];
    const auto* job = job_;
    lock.unlock();
    (*job)(range.first, range.second);
    lock.lock();
    if (--pending_ == 0) done_cv_.notify_one();
  }
}

}  // namespace plexus
