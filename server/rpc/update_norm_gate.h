// UpdateNormGate: the door's norm bounds on updates, the fixed one (--max-update-norm) and the
// adaptive one (AdaptiveNormBound), measured by UpdateNorms. Measure an update's norm without any
// lock (model-sized work), then Admit it under the server's lock: checked against both bounds
// and, refused or not, observed by the adaptive one. Owns its bounds; reads the engine's model
// only inside Admit. Thread-compatible: the server calls Admit under its lock.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/model_state.h"
#include "core/status.h"
#include "core/update.h"
#include "server/rpc/adaptive_norm_bound.h"
#include "server/rpc/update_norm.h"

namespace plexus {

struct NormLimits {
  double max_update_norm = 0;   // 0: no fixed bound
  double adaptive_factor = 10;  // 0: no adaptive bound
  size_t adaptive_clients = 100;
  size_t adaptive_min_clients = 5;
};

class UpdateNormGate {
 public:
  // `layout` is the model's; `buffer_names` its tensors that are buffers (UpdateNorms).
  UpdateNormGate(const NormLimits& limits, const ModelState& layout, const std::vector<std::string>& buffer_names);

  // The norm Admit checks: NaN when no bound needs one (and the model has no buffers to check);
  // InvalidArgument for a buffer changed beyond UpdateNorms::kMaxBufferChange. Thread-safe.
  Result<double> Measure(const Update& u, const std::string& task_id) const;

  // InvalidArgument when `norm` exceeds the fixed bound or the adaptive one over `model` (the
  // engine's current one); the adaptive bound observes the norm either way (a task sent again
  // counted once). A NaN norm passes: the engine refuses non-finite values, naming them.
  Status Admit(const std::string& client_id, const std::string& task_id, double norm, const ModelState& model);

 private:
  Status Check(const std::string& task_id, double norm, const ModelState& model);

  const NormLimits limits_;
  AdaptiveNormBound adaptive_;
  const UpdateNorms norms_;
  std::optional<std::pair<uint64_t, double>> model_norm_;  // (version, trainable L2 norm)
};

}  // namespace plexus
