// ClientRegistry: the clients an engine knows (persisted in the store) and when each was last
// heard from, on the engine's clock. Borrows store and clock. Single-threaded (owned by an engine).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "server/coordinator/engine.h"
#include "server/store/store.h"

namespace plexus {

class ClientRegistry {
 public:
  ClientRegistry(Store* store, const Clock* clock, int64_t timeout_ms)
      : store_(store), clock_(clock), timeout_ms_(timeout_ms) {}

  // Known from an earlier run; not counted as connected until heard from.
  void Restore(const std::vector<std::string>& ids) {
    for (const std::string& id : ids) last_seen_ms_.emplace(id, kNeverHeard);
  }

  // Registers (or refreshes) a client and marks it heard from. Returns its id: `client.id`, or a
  // new "client-N" when empty. InvalidArgument for a negative example count or an id longer
  // than 128 characters; the store's error if it cannot be persisted.
  Result<std::string> Join(const ClientRecord& client);

  // The door check for every call after Join: NotFound for an unknown client, otherwise marks
  // it heard from.
  Status Admit(const std::string& id);
  // Admit's check without marking the client heard from.
  Status CheckKnown(const std::string& id) const;

  // A known client no longer counts as connected until heard from again (a revoked one never is).
  void Forget(const std::string& id) {
    if (auto it = last_seen_ms_.find(id); it != last_seen_ms_.end()) it->second = kNeverHeard;
  }
  // Clients heard from within the timeout, sorted by id.
  std::vector<std::string> Connected() const;
  // The same as pointers to the registry's own ids (valid until the next Join or Restore): a
  // quarter of the memory for a million clients, for callers that keep only a few.
  std::vector<const std::string*> ConnectedIds() const;
  int64_t known_count() const { return static_cast<int64_t>(last_seen_ms_.size()); }
  // Sets the status's known and connected client counts.
  void FillStatus(EngineStatus* s) const {
    s->known_clients = known_count();
    s->connected_clients = static_cast<int64_t>(Connected().size());
  }

 private:
  Store* const store_;
  const Clock* const clock_;
  const int64_t timeout_ms_;
  static constexpr int64_t kNeverHeard = INT64_MIN;

  // Every known client (one map: a million simulated clients cost one node each).
  std::map<std::string, int64_t> last_seen_ms_;
};

}  // namespace plexus
