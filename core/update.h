// Update: what one client sends back for one task. The payload is always a delta
// (trained weights minus the base model of version `base_version`); transports that receive full
// weights convert them before building an Update. Value type; thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/model_state.h"

namespace plexus {

struct Update {
  std::string client_id;
  std::string task_id;
  uint64_t base_version = 0;
  int64_t num_examples = 0;               // examples the client trained on; FedAvg's weight
  int64_t local_steps = 0;                // optimizer steps the client ran
  std::map<std::string, double> metrics;  // e.g. train_loss
  ModelState delta;
};

}  // namespace plexus
