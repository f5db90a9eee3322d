#include "apps/plexus/run_estimate.h"

#include <chrono>
#include <cstdio>

#include "apps/plexus/commands.h"

namespace plexus::cli {

double MeasureMsPerStep(Trainer* trainer, const ModelState& start, const Dataset& train, int64_t batch_size) {
  const DatasetView data = DatasetView::Prefix(train, static_cast<size_t>(4 * batch_size));
  TrainOptions o;
  o.batch_size = batch_size;
  o.local_steps = 1;
  Take(trainer->Train(start, data, o), "timing a training step");  // warm-up: allocations, first calls
  o.local_steps = 3;
  const auto begin = std::chrono::steady_clock::now();
  Take(trainer->Train(start, data, o), "timing a training step");
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count() / 3.0;
}

void PrintTrainingEstimate(double ms_per_step, int64_t tasks, int64_t steps_per_task, int ranks) {
  const double seconds = ms_per_step * static_cast<double>(tasks) * static_cast<double>(steps_per_task) / 1000.0 /
                         static_cast<double>(ranks > 1 ? ranks : 1);
  char amount[64];
  if (seconds < 90) {
    std::snprintf(amount, sizeof amount, "%.0f s", seconds);
  } else if (seconds < 5400) {
    std::snprintf(amount, sizeof amount, "%.0f min", seconds / 60);
  } else {
    std::snprintf(amount, sizeof amount, "%.1f h", seconds / 3600);
  }
  std::printf("plexus sim: about %s of training ahead (%lld tasks x %lld steps at %.1f ms per step, measured%s)\n",
              amount, static_cast<long long>(tasks), static_cast<long long>(steps_per_task), ms_per_step,
              ranks > 1 ? (", over " + std::to_string(ranks) + " ranks").c_str() : "");
  std::fflush(stdout);
}

}  // namespace plexus::cli
