#include "server/rpc/update_norm_gate.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

namespace plexus {

UpdateNormGate::UpdateNormGate(const NormLimits& limits, const ModelState& layout,
                               const std::vector<std::string>& buffer_names)
    : limits_(limits),
      adaptive_(limits.adaptive_factor, limits.adaptive_clients, limits.adaptive_min_clients),
      norms_(layout, buffer_names) {}

Result<double> UpdateNormGate::Measure(const Update& u, const std::string& task_id) const {
  const bool bounded = limits_.max_update_norm > 0 || adaptive_.enabled();
  if (!bounded && !norms_.has_buffers()) return std::numeric_limits<double>::quiet_NaN();
  return norms_.Measure(u, task_id);
}

Status UpdateNormGate::Admit(const std::string& client_id, const std::string& task_id, double norm,
                             const ModelState& model) {
  const Status within = Check(task_id, norm, model);
  // Refused or not, the norm is what this client sends: the bound learns from it (one slot per
  // client, a re-sent task counted once), so it cannot ratchet below honest clients.
  adaptive_.Observe(client_id, task_id, norm);
  return within;
}

Status UpdateNormGate::Check(const std::string& task_id, double norm, const ModelState& model) {
  if (!std::isfinite(norm)) return Status::Ok();
  if (limits_.max_update_norm > 0 && norm > limits_.max_update_norm) {
    return InvalidArgumentError(
        fmt::format("update for task {} has L2 norm {:g}, above the server's bound of {:g} (--max-update-norm)",
                    task_id, norm, limits_.max_update_norm));
  }
  if (!adaptive_.enabled()) return Status::Ok();
  if (!model_norm_ || model_norm_->first != model.version()) {
    model_norm_.emplace(model.version(), norms_.TrainableNorm(model));  // once a version
  }
  const double adaptive = adaptive_.Bound(model_norm_->second);
  if (norm <= adaptive) return Status::Ok();
  return InvalidArgumentError(fmt::format(
      "update for task {} has L2 norm {:g}, above {:g} ({:g} times the median of recent clients' latest norms "
      "or, before {} clients have sent any, of the model's norm; --adaptive-norm-factor)",
      task_id, norm, adaptive, limits_.adaptive_factor, limits_.adaptive_min_clients));
}

}  // namespace plexus
