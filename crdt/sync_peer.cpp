#include "crdt/sync_peer.h"

#include <set>

#include "crdt/crdt_replica.h"

namespace plexus {

LocalPeer::LocalPeer(const CrdtReplica& replica) : replica_(replica), digest_(replica.set().Entries()) {
  source_.node = [this](const std::string& prefix) -> Result<std::pair<std::string, bool>> {
    return digest_.Node(prefix);
  };
  source_.entries_under = [this](const std::string& prefix) -> Result<std::vector<std::string>> {
    return digest_.EntriesUnder(prefix);
  };
}

Result<StateDelta> LocalPeer::Fetch(const std::vector<std::string>& entries) {
  StateDelta delta;
  delta.set = replica_.set().Select(std::set<std::string>(entries.begin(), entries.end()));
  for (const auto& [dot, id] : delta.set.adds()) {
    const Contribution* c = replica_.Find(id);
    if (!c)
      return DataLossError("replica " + replica_.replica_id() + " lists contribution " + id.substr(0, 12) +
                           "... it does not hold");
    delta.contributions.emplace(id, *c);
  }
  return delta;
}

}  // namespace plexus
