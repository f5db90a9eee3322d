#include "gossip/node/loop_work.h"

#include <memory>
#include <utility>

namespace plexus::gossip {

LoopWork::LoopWork(uv_loop_t* loop) : loop_(loop) {
  uv_async_init(loop_, &wake_, [](uv_async_t* a) { static_cast<LoopWork*>(a->data)->RunMailbox(); });
  wake_.data = this;
}

void LoopWork::OffLoop(std::function<void()> work, std::function<void()> done) {
  struct Job {
    uv_work_t req;
    std::function<void()> work, done;
  };
  auto* job = new Job{{}, std::move(work), std::move(done)};
  job->req.data = job;
  uv_queue_work(
      loop_, &job->req, [](uv_work_t* req) { static_cast<Job*>(req->data)->work(); },
      [](uv_work_t* req, int) {
        std::unique_ptr<Job> job(static_cast<Job*>(req->data));
        job->done();
      });
}

LoopWork::~LoopWork() {
  for (auto& [id, t] : threads_) t.join();
}

void LoopWork::OnOwnThread(std::function<void()> work, std::function<void()> done) {
  const uint64_t id = next_thread_++;
  threads_.emplace(id, std::thread([this, id, work = std::move(work), done = std::move(done)]() mutable {
                     work();
                     Post([this, id, done = std::move(done)] {
                       // The thread has nothing left to do but return from Post.
                       threads_.at(id).join();
                       threads_.erase(id);
                       done();
                     });
                   }));
}

void LoopWork::Post(std::function<void()> f) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    mailbox_.push_back(std::move(f));
  }
  uv_async_send(&wake_);
}

void LoopWork::Close() { uv_close(reinterpret_cast<uv_handle_t*>(&wake_), nullptr); }

void LoopWork::RunMailbox() {
  std::deque<std::function<void()>> work;
  {
    std::lock_guard<std::mutex> lock(mu_);
    work.swap(mailbox_);
  }
  for (auto& f : work) f();
}

}  // namespace plexus::gossip
