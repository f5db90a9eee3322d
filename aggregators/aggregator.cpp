#include "aggregators/aggregator.h"

namespace plexus {

Status Aggregator::FoldAll(std::span<const Update* const> updates) {
  for (const Update* u : updates) PLEXUS_RETURN_IF_ERROR(Fold(*u));
  return Status::Ok();
}

Status Aggregator::FoldScaled(Update& update, double value_scale) {
  if (value_scale != 1.0) update.delta.Scale(static_cast<float>(value_scale));
  return Fold(update);
}

Status Aggregator::FoldShared(std::shared_ptr<Update> update, double value_scale) {
  return FoldScaled(*update, value_scale);
}

Status Aggregator::RestoreState(std::string_view state) {
  if (state.empty()) return Status::Ok();
  return InvalidArgumentError(Describe() + " keeps no state between rounds, but " + std::to_string(state.size()) +
                              " bytes of state were stored");
}

Result<ModelState> Aggregator::Aggregate(const ModelState& base, std::span<const Update* const> updates) {
  PLEXUS_RETURN_IF_ERROR(Begin(base));
  PLEXUS_RETURN_IF_ERROR(FoldAll(updates));
  return Finalize();
}

}  // namespace plexus
