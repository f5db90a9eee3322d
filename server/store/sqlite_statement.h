// Thin helpers over the SQLite C API shared by everything Plexus keeps in SQLite: opening a
// database the way Plexus wants it (WAL, synchronous=FULL, foreign keys, a busy timeout), running
// SQL, mapping result codes to Status, and a prepared statement that finalizes itself.
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

  Status prepared(const std::string& what) const { return rc_ == SQLITE_OK ? Status::Ok() : SqliteError(db_, rc_, what); }
  SqliteStatement& Bind(int i, int64_t v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  SqliteStatement& Bind(int i, double v) {
    sqlite3_bind_double(s_, i, v);
    return *this;
  }
  SqliteStatement& Bind(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  SqliteStatement& BindBlob(int i, const std::string& v) {
    sqlite3_bind_blob64(s_, i, v.data(), v.size(), SQLITE_TRANSIENT);
    return *this;
  }
  // Binds without a copy (a model-sized blob would otherwise be copied once more): v must stay
  // alive and unchanged until the statement has run.
  SqliteStatement& BindBlobNoCopy(int i, std::string_view v) {
    sqlite3_bind_blob64(s_, i, v.data(), v.size(), SQLITE_STATIC);
    return *this;
  }
  SqliteStatement& BindOptional(int i, const std::optional<double>& v) {
    if (v) {
      sqlite3_bind_double(s_, i, *v);
    } else {
      sqlite3_bind_null(s_, i);
    }
    return *this;
  }
  int Step() { return sqlite3_step(s_); }
  int64_t Int(int c) const { return sqlite3_column_int64(s_, c); }
  double Double(int c) const { return sqlite3_column_double(s_, c); }
  bool IsNull(int c) const { return sqlite3_column_type(s_, c) == SQLITE_NULL; }
  std::string Text(int c) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_blob(s_, c));
    return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(s_, c))) : std::string();
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* s_ = nullptr;
  int rc_;
};

// Runs a statement that returns no rows.
Status RunStatement(sqlite3* db, SqliteStatement& st, const std::string& what);

}  // namespace plexus
