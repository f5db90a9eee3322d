#include "simulations/task_runner.h"

#include <string>

#include "simulations/attack.h"

namespace plexus {

Result<TrainOutcome> TrainJobWith(Trainer* trainer, const Dataset& train, const TrainJob& job) {
  DatasetView view{&train, job.indices};
  if (job.flip_labels) view.label_map = kFlippedLabels;
  return trainer->Train(*job.base, view, job.options);
}

Status LocalTaskRunner::Start(uint64_t key, TrainJob job) {
  if (!jobs_.emplace(key, std::move(job)).second) {
    return InternalError("training job " + std::to_string(key) + " started twice");
  }
  return Status::Ok();
}

Result<TrainOutcome> LocalTaskRunner::Finish(uint64_t key) {
  auto it = jobs_.find(key);
  if (it == jobs_.end()) return NotFoundError("no training job " + std::to_string(key));
  const TrainJob job = std::move(it->second);
  jobs_.erase(it);
  return TrainJobWith(trainer_, *train_, job);
}

}  // namespace plexus
