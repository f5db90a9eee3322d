#include "crdt/store/replica_file.h"

#include "core/safetensors.h"
#include "sqlite/sqlite_statement.h"

namespace plexus {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS replica (id INTEGER PRIMARY KEY CHECK (id = 1), replica_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS contributions (
  id TEXT PRIMARY KEY, author TEXT NOT NULL, examples INTEGER NOT NULL, base_version INTEGER NOT NULL,
  created_round INTEGER NOT NULL, signature BLOB NOT NULL, delta BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS adds (
  replica TEXT NOT NULL, counter INTEGER NOT NULL, contribution TEXT NOT NULL, PRIMARY KEY (replica, counter));
CREATE TABLE IF NOT EXISTS tombstones (replica TEXT NOT NULL, counter INTEGER NOT NULL, PRIMARY KEY (replica, counter));
)sql";

// Closes the connection when it goes out of scope.
struct Connection {
  sqlite3* db = nullptr;
  ~Connection() { sqlite3_close(db); }
};

Result<std::string> StoredReplicaId(sqlite3* db) {
  SqliteStatement st(db, "SELECT replica_id FROM replica WHERE id = 1");
  PLEXUS_RETURN_IF_ERROR(st.prepared("read replica id"));
  const int rc = st.Step();
  if (rc == SQLITE_ROW) return st.Text(0);
  if (rc == SQLITE_DONE) return NotFoundError("no replica state");
  return SqliteError(db, rc, "read replica id");
}

Status SaveRows(sqlite3* db, const CrdtReplica& replica) {
  Result<std::string> stored = StoredReplicaId(db);
  if (stored.ok() && *stored != replica.replica_id()) {
    return FailedPreconditionError("the file holds replica '" + *stored + "', not '" + replica.replica_id() + "'");
  }
  if (!stored.ok()) {
    if (stored.status().code() != StatusCode::kNotFound) return stored.status();
    SqliteStatement st(db, "INSERT INTO replica(id, replica_id) VALUES(1, ?)");
    st.Bind(1, replica.replica_id());
    PLEXUS_RETURN_IF_ERROR(RunStatement(db, st, "save replica id"));
  }
  for (const auto& [id, c] : replica.contributions()) {
    SqliteStatement st(db,
                       "INSERT OR IGNORE INTO contributions(id, author, examples, base_version, created_round, "
                       "signature, delta) VALUES(?,?,?,?,?,?,?)");
    st.Bind(1, id).Bind(2, c.author).Bind(3, c.examples).Bind(4, static_cast<int64_t>(c.base_version));
    st.Bind(5, static_cast<int64_t>(c.created_round)).BindBlob(6, c.signature).BindBlob(7, EncodeSafetensors(c.delta));
    PLEXUS_RETURN_IF_ERROR(RunStatement(db, st, "save contribution"));
  }
  for (const auto& [dot, id] : replica.set().adds()) {
    SqliteStatement st(db, "INSERT OR IGNORE INTO adds(replica, counter, contribution) VALUES(?,?,?)");
    st.Bind(1, dot.replica).Bind(2, static_cast<int64_t>(dot.counter)).Bind(3, id);
    PLEXUS_RETURN_IF_ERROR(RunStatement(db, st, "save add"));
  }
  for (const Dot& dot : replica.set().tombstones()) {
    SqliteStatement st(db, "INSERT OR IGNORE INTO tombstones(replica, counter) VALUES(?,?)");
    st.Bind(1, dot.replica).Bind(2, static_cast<int64_t>(dot.counter));
    PLEXUS_RETURN_IF_ERROR(RunStatement(db, st, "save tombstone"));
  }
  return Status::Ok();
}

}  // namespace

Status SaveReplica(const CrdtReplica& replica, const std::string& path) {
  Connection c;
  PLEXUS_ASSIGN_OR_RETURN(c.db, OpenSqlite(path, kSchema));
  SqliteTransaction transaction(c.db);
  PLEXUS_RETURN_IF_ERROR(transaction.status());
  PLEXUS_RETURN_IF_ERROR(SaveRows(c.db, replica).WithContext("save replica to '" + path + "'"));
  return transaction.Commit();
}

Result<std::unique_ptr<CrdtReplica>> LoadReplica(const std::string& path, const AuthorKeys* keys) {
  Connection c;
  PLEXUS_ASSIGN_OR_RETURN(c.db, OpenSqlite(path, kSchema));
  PLEXUS_ASSIGN_OR_RETURN(std::string replica_id, StoredReplicaId(c.db));
  std::map<std::string, Contribution> contributions;
  {
    SqliteStatement st(c.db,
                       "SELECT id, author, examples, base_version, created_round, signature, delta FROM contributions");
    PLEXUS_RETURN_IF_ERROR(st.prepared("load contributions"));
    int rc;
    while ((rc = st.Step()) == SQLITE_ROW) {
      Contribution k;
      k.author = st.Text(1);
      k.examples = st.Int(2);
      k.base_version = static_cast<uint64_t>(st.Int(3));
      k.created_round = static_cast<uint64_t>(st.Int(4));
      k.signature = st.Text(5);
      PLEXUS_ASSIGN_OR_RETURN(k.delta, DecodeSafetensors(st.Text(6)));
      contributions.emplace(st.Text(0), std::move(k));
    }
    if (rc != SQLITE_DONE) return SqliteError(c.db, rc, "load contributions");
  }
  std::map<Dot, std::string> adds;
  std::set<Dot> tombstones;
  {
    SqliteStatement st(c.db, "SELECT replica, counter, contribution FROM adds");
    PLEXUS_RETURN_IF_ERROR(st.prepared("load adds"));
    int rc;
    while ((rc = st.Step()) == SQLITE_ROW) adds.emplace(Dot{st.Text(0), static_cast<uint64_t>(st.Int(1))}, st.Text(2));
    if (rc != SQLITE_DONE) return SqliteError(c.db, rc, "load adds");
  }
  {
    SqliteStatement st(c.db, "SELECT replica, counter FROM tombstones");
    PLEXUS_RETURN_IF_ERROR(st.prepared("load tombstones"));
    int rc;
    while ((rc = st.Step()) == SQLITE_ROW) tombstones.insert(Dot{st.Text(0), static_cast<uint64_t>(st.Int(1))});
    if (rc != SQLITE_DONE) return SqliteError(c.db, rc, "load tombstones");
  }
  auto replica = std::make_unique<CrdtReplica>(replica_id, keys);
  PLEXUS_RETURN_IF_ERROR(
      replica->Restore(ContributionSet::FromState(replica_id, std::move(adds), std::move(tombstones)), contributions)
          .WithContext("load replica from '" + path + "'"));
  return replica;
}

}  // namespace plexus
