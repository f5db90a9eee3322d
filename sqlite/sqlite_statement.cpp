#include "sqlite/sqlite_statement.h"

namespace plexus {

Status SqliteError(sqlite3* db, int rc, const std::string& what) {
  const std::string msg = what + ": " + (db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  switch (rc) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return AbortedError(msg);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return DataLossError(msg);
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
    case SQLITE_FULL:
      return UnavailableError(msg);
    case SQLITE_CONSTRAINT:
      return AlreadyExistsError(msg);
    default:
      return InternalError(msg);
  }
}

Status ExecSql(sqlite3* db, const char* sql) {
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err);
  if (rc == SQLITE_OK) return Status::Ok();
  Status s = SqliteError(db, rc, err ? err : "exec");
  sqlite3_free(err);
  return s;
}

Result<sqlite3*> OpenSqlite(const std::string& path, const char* schema) {
  sqlite3* db = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    Status s = SqliteError(db, rc, "open database '" + path + "'");
    sqlite3_close(db);
    return s;
  }
  sqlite3_busy_timeout(db, 5000);
  Status s = ExecSql(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;");
  if (s.ok()) s = ExecSql(db, schema);
  if (!s.ok()) {
    sqlite3_close(db);
    return s.WithContext("open database '" + path + "'");
  }
  return db;
}

Status RunStatement(sqlite3* db, SqliteStatement& st, const std::string& what) {
  PLEXUS_RETURN_IF_ERROR(st.prepared(what));
  const int rc = st.Step();
  return rc == SQLITE_DONE ? Status::Ok() : SqliteError(db, rc, what);
}

}  // namespace plexus
