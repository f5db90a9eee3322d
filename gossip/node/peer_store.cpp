#include "gossip/node/peer_store.h"

#include "core/safetensors.h"
#include "sqlite/sqlite_statement.h"

namespace plexus::gossip {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS peer (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  node INTEGER NOT NULL,
  rounds INTEGER NOT NULL,
  model BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS members (
  node INTEGER PRIMARY KEY,
  address TEXT NOT NULL,
  incarnation INTEGER NOT NULL,
  state INTEGER NOT NULL
);
)sql";

}  // namespace

Result<std::unique_ptr<PeerStore>> PeerStore::Open(const std::string& path) {
  PLEXUS_ASSIGN_OR_RETURN(sqlite3 * db, OpenSqlite(path, kSchema));
  return std::unique_ptr<PeerStore>(new PeerStore(db));
}

PeerStore::~PeerStore() { sqlite3_close(db_); }

Result<bool> PeerStore::IsPeerDatabase(const std::string& path) {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  if (rc != SQLITE_OK) {
    const std::string why = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return UnavailableError("cannot read '" + path + "': " + why);
  }
  bool peer = false;
  {
    SqliteStatement q(db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'peer'");
    if (Status prepared = q.prepared("read the schema"); !prepared.ok()) {
      sqlite3_close(db);
      return prepared;
    }
    peer = q.Step() == SQLITE_ROW;
  }
  sqlite3_close(db);
  return peer;
}

Result<std::optional<SavedPeer>> PeerStore::Load(NodeId node) {
  PLEXUS_ASSIGN_OR_RETURN(std::optional<SavedPeer> saved, LoadAny());
  if (saved && saved->node != node) {
    return FailedPreconditionError("the database belongs to peer " + std::to_string(saved->node) + ", not " +
                                   std::to_string(node) + " (each peer needs its own --db)");
  }
  return saved;
}

Result<std::optional<SavedPeer>> PeerStore::LoadAny() {
  std::lock_guard<std::mutex> lock(mu_);
  SqliteStatement q(db_, "SELECT node, rounds, model FROM peer WHERE id = 1");
  PLEXUS_RETURN_IF_ERROR(q.prepared("load peer"));
  const int rc = q.Step();
  if (rc == SQLITE_DONE) return std::optional<SavedPeer>();
  if (rc != SQLITE_ROW) return SqliteError(db_, rc, "load peer");
  SavedPeer saved;
  saved.node = static_cast<NodeId>(q.Int(0));
  saved.rounds = static_cast<uint64_t>(q.Int(1));
  PLEXUS_ASSIGN_OR_RETURN(saved.model, DecodeSafetensors(q.Text(2)));
  SqliteStatement m(db_, "SELECT node, address, incarnation, state FROM members ORDER BY node");
  PLEXUS_RETURN_IF_ERROR(m.prepared("load members"));
  int step;
  while ((step = m.Step()) == SQLITE_ROW) {
    const int64_t state = m.Int(3);
    if (state < 0 || state > 3) return DataLossError("member state " + std::to_string(state) + " in the database");
    saved.members.push_back(
        {static_cast<NodeId>(m.Int(0)), m.Text(1), static_cast<uint64_t>(m.Int(2)), static_cast<MemberState>(state)});
  }
  if (step != SQLITE_DONE) return SqliteError(db_, step, "load members");
  return std::optional<SavedPeer>(std::move(saved));
}

Status PeerStore::Save(NodeId node, uint64_t rounds, const ModelState& model,
                       const std::vector<MemberUpdate>& members) {
  const std::string bytes = EncodeSafetensors(model);
  std::lock_guard<std::mutex> lock(mu_);
  SqliteTransaction tx(db_);
  PLEXUS_RETURN_IF_ERROR(tx.status());
  SqliteStatement p(db_, "INSERT OR REPLACE INTO peer (id, node, rounds, model) VALUES (1, ?, ?, ?)");
  p.Bind(1, static_cast<int64_t>(node)).Bind(2, static_cast<int64_t>(rounds)).BindBlobNoCopy(3, bytes);
  if (int rc = p.Step(); rc != SQLITE_DONE) return SqliteError(db_, rc, "save peer");
  PLEXUS_RETURN_IF_ERROR(ExecSql(db_, "DELETE FROM members"));
  for (const MemberUpdate& u : members) {
    if (u.node == node) continue;
    SqliteStatement m(db_, "INSERT INTO members (node, address, incarnation, state) VALUES (?, ?, ?, ?)");
    m.Bind(1, static_cast<int64_t>(u.node))
        .Bind(2, u.address)
        .Bind(3, static_cast<int64_t>(u.incarnation))
        .Bind(4, static_cast<int64_t>(u.state));
    if (int rc = m.Step(); rc != SQLITE_DONE) return SqliteError(db_, rc, "save members");
  }
  return tx.Commit();
}

}  // namespace plexus::gossip
