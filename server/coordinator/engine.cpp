#include "server/coordinator/engine.h"

namespace plexus {

Result<RestoredState> RestoreEngineState(Store* store, const ModelState& initial) {
  RestoredState r;
  PLEXUS_ASSIGN_OR_RETURN(std::optional<ModelState> latest, store->LatestCheckpoint());
  if (latest) {
    Status same = latest->CheckSameLayout(initial);
    if (!same.ok()) {
      return FailedPreconditionError("the database holds a model of another architecture: " + same.message());
    }
    r.model = std::move(*latest);
  } else {
    r.model = initial;
    r.model.set_version(0);
    PLEXUS_RETURN_IF_ERROR(store->PutCheckpoint(r.model));
  }
  PLEXUS_ASSIGN_OR_RETURN(std::vector<ClientRecord> clients, store->ListClients());
  for (const ClientRecord& c : clients) r.client_ids.push_back(c.id);
  PLEXUS_ASSIGN_OR_RETURN(r.history, store->ListRounds());
  return r;
}

}  // namespace plexus
