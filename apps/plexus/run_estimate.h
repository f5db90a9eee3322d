// How long a simulation's training will take, said before it starts: one local step of the model
// is timed on this machine and multiplied by the steps the settings imply. An estimate (it leaves
// out evaluation and the protocol, which are small beside training for the built-in models).
// Throws CommandError (CLI edge only) when the timing itself fails.
#pragma once

#include <cstdint>
#include <string>

#include "compute/dataset.h"
#include "compute/trainer.h"

namespace plexus::cli {

// Milliseconds per local SGD step from `start` at `batch_size`, timed over three steps after a
// warm-up step, on the first examples of `train`.
double MeasureMsPerStep(Trainer* trainer, const ModelState& start, const Dataset& train, int64_t batch_size);

// "plexus sim: about 5 min of training ahead (300 tasks x 50 steps at 20 ms per step, measured)".
void PrintTrainingEstimate(double ms_per_step, int64_t tasks, int64_t steps_per_task, int ranks);

}  // namespace plexus::cli
