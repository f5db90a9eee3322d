#include "gossip/node/loop_work.h"

#include <memory>
#include <utility>

namespace plexus::gossip {

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

}  // namespace plexus::gossip
