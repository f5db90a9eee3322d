// Update: what one client sends back for one task. The payload is always a delta
// (trained weights minus the base model of version `base_version`); transports that receive full
// weights convert them before building an Update. A compressed upload may carry its values in
// `coded` instead (core/coded_delta.h): `delta` is empty then, and only strategies that fold
// coded deltas (Aggregator::folds_coded) are given the update. Value type (copies share the
// immutable coded values); thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "core/coded_delta.h"
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
  std::shared_ptr<const CodedDelta> coded{};  // set: the values, and `delta` is empty
};

// Makes `update` carry float32 values: its coded values, if any, decoded into `layout`'s tensors
// (for a strategy that does not fold codes). REQUIRES: coded values of layout's size.
inline void MaterializeCoded(Update& update, const ModelState& layout) {
  if (!update.coded) return;
  update.delta = update.coded->Materialize(layout);
  update.coded.reset();
}

}  // namespace plexus
