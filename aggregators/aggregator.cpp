#include "aggregators/aggregator.h"

namespace plexus {

Status Aggregator::FoldAll(std::span<const Update* const> updates) {
  for (const Update* u : updates) PLEXUS_RETURN_IF_ERROR(Fold(*u));
  return Status::Ok();
}

}  // namespace plexus
