// PeerStore: what a `plexus peer` keeps across a crash (`--db PATH`, SQLite): its model and the
// rounds it has completed, saved after every round, and the membership it last saw, so a peer
// killed with SIGKILL and started again with the same --db continues from its last saved round
// and knows whom to call. Thread-safe (one connection behind a mutex: saves run on worker
// threads, off the node's event loop).
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/model_state.h"
#include "core/status.h"
#include "gossip/membership/membership.h"

struct sqlite3;  // SQLite stays in peer_store.cpp

namespace plexus::gossip {

struct SavedPeer {
  NodeId node = 0;
  uint64_t rounds = 0;
  ModelState model;
  std::vector<MemberUpdate> members;  // excluding the node itself
};

class PeerStore {
 public:
  // Opens or creates the database. Unavailable / DataLoss as SQLite reports.
  static Result<std::unique_ptr<PeerStore>> Open(const std::string& path);
  ~PeerStore();

  // Whether `path` is a peer's database (read only: nothing is created or changed). Unavailable
  // when the file cannot be read as SQLite.
  static Result<bool> IsPeerDatabase(const std::string& path);

  // The state saved last, or nullopt for a new database. FailedPrecondition when the database
  // belongs to another node id (two peers must not share a --db).
  Result<std::optional<SavedPeer>> Load(NodeId node);
  // The same whichever node saved it (plexus export).
  Result<std::optional<SavedPeer>> LoadAny();
  // Replaces the saved state, atomically (one transaction).
  Status Save(NodeId node, uint64_t rounds, const ModelState& model, const std::vector<MemberUpdate>& members);

 private:
  explicit PeerStore(sqlite3* db) : db_(db) {}
  std::mutex mu_;
  sqlite3* db_;
};

}  // namespace plexus::gossip
