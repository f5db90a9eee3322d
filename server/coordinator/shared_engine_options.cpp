#include "server/coordinator/shared_engine_options.h"

#include <string>

namespace plexus {

Status PositiveOption(int64_t v, const char* field) {
  if (v > 0) return Status::Ok();
  return InvalidArgumentError(std::string(field) + " must be positive (got " + std::to_string(v) + ")");
}

Status SharedEngineOptions::ValidateShared() const {
  PLEXUS_RETURN_IF_ERROR(PositiveOption(rounds, "rounds"));
  PLEXUS_RETURN_IF_ERROR(PositiveOption(client_timeout_ms, "client timeout"));
  PLEXUS_RETURN_IF_ERROR(PositiveOption(poll_retry_ms, "poll retry"));
  if (task.local_steps < 0) return InvalidArgumentError("local-steps must not be negative");
  if (task.local_steps == 0) PLEXUS_RETURN_IF_ERROR(PositiveOption(task.local_epochs, "local-epochs"));
  PLEXUS_RETURN_IF_ERROR(PositiveOption(task.batch_size, "batch-size"));
  if (!(task.learning_rate > 0.0)) return InvalidArgumentError("learning rate must be positive");
  if (!(task.momentum >= 0.0 && task.momentum < 1.0)) return InvalidArgumentError("momentum must lie in [0, 1)");
  if (task.optimizer != "sgd" && task.optimizer != "adamw") {
    return InvalidArgumentError("optimizer '" + task.optimizer + "': sgd or adamw");
  }
  if (!(task.weight_decay >= 0.0 && task.weight_decay < 1.0)) {
    return InvalidArgumentError("weight decay must lie in [0, 1)");
  }
  return Status::Ok();
}

}  // namespace plexus
