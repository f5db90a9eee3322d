// The one SQLite helper library, shared by everything Plexus keeps in SQLite (the server's store,
// CRDT replica files): opening a database the way Plexus wants it (WAL, synchronous=FULL,
// foreign keys, a busy timeout), running SQL, mapping result codes to Status (a busy database is
// Aborted, not a generic error), a prepared statement that finalizes itself and reports a failed
// bind as the failure of its step, and a transaction that rolls back unless committed.
// A SqliteStatement belongs to one thread at a time; the functions are thread-safe for distinct
// connections.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace plexus {

// SQLite's result code as a Status with SQLite's own message: busy/locked -> Aborted,
// corrupt/not a database -> DataLoss, cannot open/IO/full -> Unavailable, constraint ->
// AlreadyExists, anything else -> Internal.
Status SqliteError(sqlite3* db, int rc, const std::string& what);

// Opens or creates the database at `path` and runs `schema`. The caller closes it.
Result<sqlite3*> OpenSqlite(const std::string& path, const char* schema);

// Runs SQL that returns no rows.
Status ExecSql(sqlite3* db, const char* sql);

class SqliteStatement {
 public:
  SqliteStatement(sqlite3* db, const char* sql) : db_(db) { rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr); }
  ~SqliteStatement() { sqlite3_finalize(s_); }
  SqliteStatement(const SqliteStatement&) = delete;
  SqliteStatement& operator=(const SqliteStatement&) = delete;

  Status prepared(const std::string& what) const {
    return rc_ == SQLITE_OK ? Status::Ok() : SqliteError(db_, rc_, what);
  }
  // Binds are checked: the first that fails (a wrong index, a value too large) is what Step()
  // returns, and the statement does not run.
  SqliteStatement& Bind(int i, int64_t v) { return Checked(sqlite3_bind_int64(s_, i, v)); }
  SqliteStatement& Bind(int i, double v) { return Checked(sqlite3_bind_double(s_, i, v)); }
  SqliteStatement& Bind(int i, const std::string& v) {
    return Checked(sqlite3_bind_text64(s_, i, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8));
  }
  SqliteStatement& BindBlob(int i, const std::string& v) {
    return Checked(sqlite3_bind_blob64(s_, i, v.data(), v.size(), SQLITE_TRANSIENT));
  }
  // Binds without a copy (a model-sized blob would otherwise be copied once more): v must stay
  // alive and unchanged until the statement has run.
  SqliteStatement& BindBlobNoCopy(int i, std::string_view v) {
    return Checked(sqlite3_bind_blob64(s_, i, v.data(), v.size(), SQLITE_STATIC));
  }
  SqliteStatement& BindOptional(int i, const std::optional<double>& v) {
    return v ? Bind(i, *v) : Checked(sqlite3_bind_null(s_, i));
  }
  // SQLITE_ROW, SQLITE_DONE, or the error (of a failed bind, or of the step).
  int Step() { return bind_rc_ != SQLITE_OK ? bind_rc_ : sqlite3_step(s_); }
  int64_t Int(int c) const { return sqlite3_column_int64(s_, c); }
  double Double(int c) const { return sqlite3_column_double(s_, c); }
  bool IsNull(int c) const { return sqlite3_column_type(s_, c) == SQLITE_NULL; }
  std::string Text(int c) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_blob(s_, c));
    return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(s_, c))) : std::string();
  }

 private:
  SqliteStatement& Checked(int rc) {
    if (bind_rc_ == SQLITE_OK && rc != SQLITE_OK) bind_rc_ = rc;
    return *this;
  }

  sqlite3* db_;
  sqlite3_stmt* s_ = nullptr;
  int rc_;
  int bind_rc_ = SQLITE_OK;
};

// A write transaction (BEGIN IMMEDIATE) that rolls back when it goes out of scope uncommitted,
// so that no path out of a multi-row change leaves it half done. Belongs to one thread.
class SqliteTransaction {
 public:
  // Status of the BEGIN in status(); Aborted when another connection holds the write lock past
  // the busy timeout.
  explicit SqliteTransaction(sqlite3* db) : db_(db), begun_(ExecSql(db, "BEGIN IMMEDIATE")) {}
  ~SqliteTransaction() {
    if (begun_.ok() && !done_) (void)ExecSql(db_, "ROLLBACK");
  }
  SqliteTransaction(const SqliteTransaction&) = delete;
  SqliteTransaction& operator=(const SqliteTransaction&) = delete;

  const Status& status() const { return begun_; }
  Status Commit() {
    if (!begun_.ok()) return begun_;
    done_ = true;
    Status committed = ExecSql(db_, "COMMIT");
    if (!committed.ok()) (void)ExecSql(db_, "ROLLBACK");
    return committed;
  }

 private:
  sqlite3* const db_;
  const Status begun_;
  bool done_ = false;
};

// Runs a statement that returns no rows.
Status RunStatement(sqlite3* db, SqliteStatement& st, const std::string& what);

}  // namespace plexus
