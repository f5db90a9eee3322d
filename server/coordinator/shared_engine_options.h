// SharedEngineOptions: the options every engine shares: how many versions the federation publishes,
// what a task asks clients to train, and how clients are told to wait or counted gone. SyncOptions
// and AsyncOptions extend it with their mode's own. Plain data.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "core/task.h"

namespace plexus {

struct SharedEngineOptions {
  int64_t rounds = 5;                 // model versions to publish; the federation then finishes
  int64_t client_timeout_ms = 60000;  // clients silent for longer are not counted connected (or sampled)
  int64_t poll_retry_ms = 1000;       // how long a client is told to wait before polling again
  TaskHyperparams task;

  // InvalidArgument naming the first bad shared field; each mode's Validate calls it first.
  Status ValidateShared() const;
};

// InvalidArgument "<field> must be positive (got <v>)" unless v > 0: for the modes' own checks.
Status PositiveOption(int64_t v, const char* field);

}  // namespace plexus
