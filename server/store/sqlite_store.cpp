#include "server/store/sqlite_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>

#include "core/atomic_file.h"
#include "core/crc32c.h"
#include "core/file_contents.h"
#include "core/little_endian.h"
#include "core/safetensors.h"
#include "core/value_bytes.h"
#include "server/store/sqlite_store_files.h"
#include "sqlite/sqlite_statement.h"

namespace plexus {
namespace {

using Stmt = SqliteStatement;
using sqlite_store::IsPlainFileName;
using sqlite_store::kLogRound;
using sqlite_store::StoredFilePrefix;

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS aggregator_state (id INTEGER PRIMARY KEY CHECK (id = 0), version INTEGER NOT NULL,
                                             state BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS clients (id TEXT PRIMARY KEY, num_examples INTEGER NOT NULL, device TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS checkpoints (
  version INTEGER PRIMARY KEY, sha256 TEXT NOT NULL, bytes BLOB NOT NULL, file TEXT);
CREATE TABLE IF NOT EXISTS rounds (
  round INTEGER PRIMARY KEY, model_version INTEGER NOT NULL REFERENCES checkpoints(version),
  model_sha256 TEXT NOT NULL, num_selected INTEGER NOT NULL, num_updates INTEGER NOT NULL,
  num_dropped INTEGER NOT NULL, num_examples INTEGER NOT NULL, attempts INTEGER NOT NULL,
  mean_train_loss REAL NOT NULL, test_accuracy REAL, test_loss REAL);
CREATE TABLE IF NOT EXISTS federated_evaluations (
  model_version INTEGER PRIMARY KEY, accuracy REAL NOT NULL, loss REAL NOT NULL, examples INTEGER NOT NULL,
  clients INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS merged_updates (
  round INTEGER NOT NULL REFERENCES rounds(round), position INTEGER NOT NULL, client_id TEXT NOT NULL,
  task_id TEXT NOT NULL, staleness INTEGER NOT NULL, grp INTEGER NOT NULL, ms_per_step REAL,
  PRIMARY KEY (round, position));
CREATE TABLE IF NOT EXISTS open_round (
  id INTEGER PRIMARY KEY CHECK (id = 1), round INTEGER NOT NULL, attempt INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS open_round_tasks (client_id TEXT PRIMARY KEY, task_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS accepted_updates (
  round INTEGER NOT NULL, attempt INTEGER NOT NULL, client_id TEXT NOT NULL, task_id TEXT NOT NULL,
  base_version INTEGER NOT NULL, num_examples INTEGER NOT NULL, local_steps INTEGER NOT NULL,
  train_loss REAL, delta BLOB NOT NULL, file TEXT, codec TEXT, PRIMARY KEY (round, attempt, client_id));
)sql";

// Databases written before models moved to files lack the `file` column of `table`, and those
// written before updates were kept coded the `codec` column of accepted_updates.
Status AddColumn(sqlite3* db, const std::string& table, const std::string& column) {
  auto has_column = [&]() -> Result<bool> {
    const std::string sql = "SELECT COUNT(*) FROM pragma_table_info('" + table + "') WHERE name = '" + column + "'";
    Stmt st(db, sql.c_str());
    PLEXUS_RETURN_IF_ERROR(st.prepared("inspect " + table));
    const int rc = st.Step();
    if (rc != SQLITE_ROW) return SqliteError(db, rc, "inspect " + table);
    return st.Int(0) > 0;
  };
  PLEXUS_ASSIGN_OR_RETURN(bool present, has_column());
  if (present) return Status::Ok();
  Status added = ExecSql(db, ("ALTER TABLE " + table + " ADD COLUMN " + column + " TEXT").c_str());
  if (added.ok()) return added;
  // Another process may have added it first.
  PLEXUS_ASSIGN_OR_RETURN(present, has_column());
  return present ? Status::Ok() : added;
}

std::string CheckpointFileName(uint64_t version) { return "v" + std::to_string(version) + ".safetensors"; }

// Removes from `dir` the files no row names (`named`): what a crash left between writing a file
// and committing its row, or between a commit and removing the files it made obsolete, and the
// spares a process kept. Only an owner (kExclusive) does it, when it opens the database: its
// lock says no other server is writing there, so every such file is garbage. A reader
// (`plexus export` beside a running server) removes nothing: it would take files the server
// holds for reuse, which no row names while they wait, however old (a file written through a
// mapping keeps its old time).
void RemoveOrphans(const std::string& dir, const std::set<std::string>& named) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (named.count(entry.path().filename().string()) == 0) std::filesystem::remove(entry.path(), ec);
  }
}

}  // namespace

Result<std::unique_ptr<SqliteStore>> SqliteStore::Open(const std::string& path, Access access) {
  const bool in_memory = path.empty() || path == ":memory:";
  int lock_fd = -1;
  if (!in_memory && access == Access::kExclusive) {
    // SQLite's own locks are POSIX record locks, which flock() does not touch on Linux, and this
    // descriptor stays open until the store closes (closing any descriptor of the file would drop
    // the process's POSIX locks on it, SQLite's included).
    lock_fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock_fd < 0) {
      return UnavailableError("cannot open database '" + path + "': " + std::strerror(errno));
    }
    if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      ::close(lock_fd);
      if (err == EWOULDBLOCK) {
        return FailedPreconditionError("database '" + path +
                                       "' is in use by another process (another plexus server?): stop it, or "
                                       "give this one its own --db");
      }
      return UnavailableError("cannot lock database '" + path + "': " + std::strerror(err));
    }
  }
  Result<sqlite3*> opened = OpenSqlite(path, kSchema);
  if (!opened.ok()) {
    if (lock_fd >= 0) ::close(lock_fd);
    return opened.status();
  }
  sqlite3* db = *opened;
  for (auto [table, column] : {std::pair{"checkpoints", "file"},
                               {"accepted_updates", "file"},
                               {"accepted_updates", "codec"},
                               {"rounds", "num_refused"},
                               {"merged_updates", "update_sha256"},
                               {"aggregator_state", "file"}}) {
    if (Status s = AddColumn(db, table, column); !s.ok()) {
      sqlite3_close(db);
      return s.WithContext("open database '" + path + "'");
    }
  }
  std::unique_ptr<SqliteStore> store(new SqliteStore(db, in_memory ? std::string() : path + ".checkpoints",
                                                     in_memory ? std::string() : path + ".updates"));
  store->lock_fd_ = lock_fd;
  {
    Stmt st(db, "SELECT file FROM aggregator_state WHERE id = 0 AND file IS NOT NULL");
    if (st.prepared("find the strategy state's file").ok() && st.Step() == SQLITE_ROW) {
      store->state_file_ = st.Text(0);
    }
  }
  if (!in_memory && access == Access::kExclusive) {
    std::lock_guard<std::mutex> lock(store->mu_);
    Result<std::vector<std::string>> named = store->AcceptedUpdateFilesLocked("", 0, 0);
    if (!named.ok()) return named.status().WithContext("open database '" + path + "'");
    RemoveOrphans(store->updates_dir_, std::set<std::string>(named->begin(), named->end()));
    // Spares and temporaries a crash left among the checkpoints.
    std::set<std::string> checkpoints;
    Stmt files(db, "SELECT file FROM checkpoints WHERE file IS NOT NULL");
    if (files.prepared("list checkpoint files").ok()) {
      while (files.Step() == SQLITE_ROW) checkpoints.insert(files.Text(0));
      if (!store->state_file_.empty()) checkpoints.insert(store->state_file_);
      RemoveOrphans(store->checkpoint_dir_, checkpoints);
    }
  }
  return store;
}

SqliteStore::~SqliteStore() {
  sqlite3_close(db_);
  if (lock_fd_ >= 0) ::close(lock_fd_);  // after SQLite's own descriptors: see Open
}

Status SqliteStore::Exec(const char* sql) { return ExecSql(db_, sql); }

Status SqliteStore::PutMeta(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_, "INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value");
  st.Bind(1, key).Bind(2, value);
  return RunStatement(db_, st, "put meta");
}

Result<std::string> SqliteStore::GetMeta(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_, "SELECT value FROM meta WHERE key = ?");
  PLEXUS_RETURN_IF_ERROR(st.prepared("get meta"));
  st.Bind(1, key);
  const int rc = st.Step();
  if (rc == SQLITE_ROW) return st.Text(0);
  if (rc == SQLITE_DONE) return NotFoundError("no metadata '" + key + "'");
  return SqliteError(db_, rc, "get meta");
}

Status SqliteStore::PutClient(const ClientRecord& c) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_,
          "INSERT INTO clients(id, num_examples, device) VALUES(?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
          "num_examples=excluded.num_examples, device=excluded.device");
  st.Bind(1, c.id).Bind(2, c.num_examples).Bind(3, c.device);
  return RunStatement(db_, st, "put client");
}

Result<std::vector<ClientRecord>> SqliteStore::ListClients() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_, "SELECT id, num_examples, device FROM clients ORDER BY id");
  PLEXUS_RETURN_IF_ERROR(st.prepared("list clients"));
  std::vector<ClientRecord> out;
  int rc;
  while ((rc = st.Step()) == SQLITE_ROW) out.push_back({st.Text(0), st.Int(1), st.Text(2)});
  if (rc != SQLITE_DONE) return SqliteError(db_, rc, "list clients");
  return out;
}

Status SqliteStore::PutCheckpointLocked(const ModelState& model, std::string_view known_sha256, bool file_written) {
  const std::string sha = known_sha256.empty() ? model.ContentSha256() : std::string(known_sha256);
  PLEXUS_ASSIGN_OR_RETURN(const std::optional<std::string> stored, StoredCheckpointSha256Locked(model.version()));
  if (stored) {
    if (*stored == sha) return Status::Ok();
    return AlreadyExistsError("checkpoint of version " + std::to_string(model.version()) +
                              " already exists with different content");
  }
  if (checkpoint_dir_.empty()) {
    Stmt st(db_, "INSERT INTO checkpoints(version, sha256, bytes) VALUES(?, ?, ?)");
    const std::string bytes = EncodeSafetensors(model);
    st.Bind(1, static_cast<int64_t>(model.version())).Bind(2, sha).BindBlobNoCopy(3, bytes);
    return RunStatement(db_, st, "put checkpoint");
  }
  // The file is durable before the row that names it commits. A crash in between leaves a file
  // no row names; it is replaced when this version is committed again.
  std::string name = CheckpointFileName(model.version());
  if (!file_written) {
    PLEXUS_ASSIGN_OR_RETURN(name, WriteCheckpointFileLocked(model));
  }
  Stmt st(db_, "INSERT INTO checkpoints(version, sha256, bytes, file) VALUES(?, ?, X'', ?)");
  st.Bind(1, static_cast<int64_t>(model.version())).Bind(2, sha).Bind(3, name);
  return RunStatement(db_, st, "put checkpoint");
}

Result<std::string> SqliteStore::WriteCheckpointFileLocked(const ModelState& model) {
  PLEXUS_RETURN_IF_ERROR(EnsureDirLocked(checkpoint_dir_, &checkpoint_dir_ready_));
  std::string name = CheckpointFileName(model.version());
  const std::string path = checkpoint_dir_ + "/" + name;
  // Over a pruned checkpoint's file where there is one (renamed to the temporary name the write
  // goes through): its blocks are reused, so the file system allocates and journals nothing.
  const bool recycled = TakeSpareFileLocked(checkpoint_dir_, &spare_checkpoints_, path + ".tmp");
  const std::string_view values = ValueBytes(model);
  PLEXUS_RETURN_IF_ERROR(recycled ? WriteFileAtomicallyOver(path, {StoredFilePrefix(model), values})
                                  : WriteFileAtomically(path, {StoredFilePrefix(model), values}));
  return name;
}

Result<std::string> SqliteStore::WriteStateFileLocked(std::string_view state) {
  PLEXUS_RETURN_IF_ERROR(EnsureDirLocked(checkpoint_dir_, &checkpoint_dir_ready_));
  const std::string name = state_file_ == sqlite_store::kStateFileNames[0] ? sqlite_store::kStateFileNames[1]
                                                                           : sqlite_store::kStateFileNames[0];
  const std::string path = checkpoint_dir_ + "/" + name;
  char header[sqlite_store::kStateFileHeaderBytes];
  std::memcpy(header, sqlite_store::kStateFileMagic, sizeof sqlite_store::kStateFileMagic);
  PutLittleEndian(state.size(), 8, header + 8);
  PutLittleEndian(Crc32c(state), 4, header + 16);
  // A name written before is durable already (it was synced into the folder when first made,
  // and Open keeps only the one a row names); a new one needs the folder synced.
  std::error_code ec;
  const bool existed = std::filesystem::exists(path, ec);
  PLEXUS_RETURN_IF_ERROR(WriteFileInPlaceSynced(path, {std::string_view(header, sizeof header), state}));
  if (!existed) PLEXUS_RETURN_IF_ERROR(SyncDirectory(checkpoint_dir_));
  return name;
}

Result<std::optional<std::string>> SqliteStore::StoredCheckpointSha256Locked(uint64_t version) {
  Stmt find(db_, "SELECT sha256 FROM checkpoints WHERE version = ?");
  PLEXUS_RETURN_IF_ERROR(find.prepared("find checkpoint"));
  find.Bind(1, static_cast<int64_t>(version));
  const int rc = find.Step();
  if (rc == SQLITE_ROW) return std::optional<std::string>(find.Text(0));
  if (rc != SQLITE_DONE) return SqliteError(db_, rc, "find checkpoint");
  return std::optional<std::string>();
}

Status SqliteStore::PrepareCheckpoint(const ModelState& model) {
  std::lock_guard<std::mutex> lock(mu_);
  prepared_.reset();
  if (checkpoint_dir_.empty()) return Status::Ok();  // checkpoints inline: the row is the write
  // A version stored already is CommitRound's to judge (the same content, or AlreadyExists):
  // its file must not be replaced here.
  PLEXUS_ASSIGN_OR_RETURN(const std::optional<std::string> stored, StoredCheckpointSha256Locked(model.version()));
  if (stored) return Status::Ok();
  PLEXUS_RETURN_IF_ERROR(WriteCheckpointFileLocked(model).status());
  prepared_ = PreparedCheckpoint{model.version(), model.data().data(), model.num_bytes()};
  return Status::Ok();
}

Status SqliteStore::EnsureDirLocked(const std::string& dir, bool* ready) {
  if (*ready) return Status::Ok();
  std::error_code ec;
  const bool created = std::filesystem::create_directories(dir, ec);
  if (ec) return UnavailableError("cannot create the directory '" + dir + "': " + ec.message());
  if (created) {
    // Models and updates are the federation's: only the server's user reads them.
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all, std::filesystem::perm_options::replace, ec);
    const std::string parent = std::filesystem::path(dir).parent_path().string();
    PLEXUS_RETURN_IF_ERROR(SyncDirectory(parent.empty() ? "." : parent));
  }
  *ready = true;
  return Status::Ok();
}

Status SqliteStore::PutCheckpoint(const ModelState& model) {
  std::lock_guard<std::mutex> lock(mu_);
  return PutCheckpointLocked(model);
}

Status SqliteStore::CommitRound(const RoundRecord& r, const ModelState& model, std::string_view aggregator_state) {
  if (model.version() != r.model_version) {
    return InvalidArgumentError("round " + std::to_string(r.round) + " publishes version " +
                                std::to_string(r.model_version) + " but the checkpoint has version " +
                                std::to_string(model.version()));
  }
  std::lock_guard<std::mutex> lock(mu_);
  const std::optional<PreparedCheckpoint> prepared = std::exchange(prepared_, std::nullopt);
  const bool file_written = prepared && prepared->version == model.version() &&
                            prepared->values == model.data().data() && prepared->bytes == model.num_bytes();
  std::string state_file;  // empty: the state goes into its row
  if (!checkpoint_dir_.empty() && aggregator_state.size() >= sqlite_store::kStateFileMinBytes) {
    PLEXUS_ASSIGN_OR_RETURN(state_file, WriteStateFileLocked(aggregator_state));
  }
  SqliteTransaction transaction(db_);
  PLEXUS_RETURN_IF_ERROR(transaction.status());
  Status s = PutCheckpointLocked(model, r.model_sha256, file_written);
  if (s.ok()) {
    Stmt st(db_,
            "INSERT INTO rounds(round, model_version, model_sha256, num_selected, num_updates, num_dropped, "
            "num_examples, attempts, mean_train_loss, test_accuracy, test_loss, num_refused) "
            "VALUES(?,?,?,?,?,?,?,?,?,?,?,?)");
    st.Bind(1, static_cast<int64_t>(r.round)).Bind(2, static_cast<int64_t>(r.model_version)).Bind(3, r.model_sha256);
    st.Bind(4, r.num_selected).Bind(5, r.num_updates).Bind(6, r.num_dropped).Bind(7, r.num_examples);
    st.Bind(8, r.attempts).Bind(9, r.mean_train_loss).BindOptional(10, r.test_accuracy).BindOptional(11, r.test_loss);
    st.Bind(12, r.num_refused);
    s = RunStatement(db_, st, "commit round " + std::to_string(r.round));
  }
  for (size_t i = 0; s.ok() && i < r.merged.size(); ++i) {
    const MergedUpdate& m = r.merged[i];
    Stmt st(db_,
            "INSERT INTO merged_updates(round, position, client_id, task_id, staleness, grp, ms_per_step, "
            "update_sha256) VALUES(?,?,?,?,?,?,?,?)");
    st.Bind(1, static_cast<int64_t>(r.round)).Bind(2, static_cast<int64_t>(i)).Bind(3, m.client_id).Bind(4, m.task_id);
    st.Bind(5, static_cast<int64_t>(m.staleness)).Bind(6, static_cast<int64_t>(m.group)).BindOptional(7, m.ms_per_step);
    if (!m.update_sha256.empty()) st.Bind(8, m.update_sha256);
    s = RunStatement(db_, st, "record merged update of round " + std::to_string(r.round));
  }
  if (s.ok()) {
    Stmt st(db_, "INSERT OR REPLACE INTO aggregator_state(id, version, state, file) VALUES(0,?,?,?)");
    st.Bind(1, static_cast<int64_t>(r.model_version));
    // A zero-length blob when the state is in its file or empty, never NULL (the column is NOT
    // NULL, and an empty view may have no pointer, which SQLite binds as NULL).
    std::string_view inline_state("", 0);
    if (state_file.empty() && !aggregator_state.empty()) inline_state = aggregator_state;
    st.BindBlobNoCopy(2, inline_state);
    if (!state_file.empty()) st.Bind(3, state_file);
    s = RunStatement(db_, st, "store the strategy state of round " + std::to_string(r.round));
  }
  // The open round's accepted updates (sync mode) go, and the log entries the record names.
  Result<std::vector<std::string>> obsolete = std::vector<std::string>();
  if (s.ok()) {
    obsolete = AcceptedUpdateFilesLocked(" AND round != ?", kLogRound, 0);
    s = obsolete.status();
  }
  for (size_t i = 0; s.ok() && i < r.logged_done.size(); ++i) {
    Result<std::vector<std::string>> file =
        AcceptedUpdateFilesLocked(" AND round = ? AND attempt = ?", kLogRound, static_cast<int64_t>(r.logged_done[i]));
    s = file.status();
    if (s.ok()) obsolete->insert(obsolete->end(), file->begin(), file->end());
    if (s.ok()) {
      Stmt st(db_, "DELETE FROM accepted_updates WHERE round = ? AND attempt = ?");
      st.Bind(1, kLogRound).Bind(2, static_cast<int64_t>(r.logged_done[i]));
      s = RunStatement(db_, st, "forget logged update " + std::to_string(r.logged_done[i]));
    }
  }
  if (s.ok()) {
    s = Exec("DELETE FROM open_round; DELETE FROM open_round_tasks; DELETE FROM accepted_updates WHERE round != 0;");
  }
  PLEXUS_RETURN_IF_ERROR(s);  // the transaction rolls back
  PLEXUS_RETURN_IF_ERROR(transaction.Commit());
  // The file the row named before stays, to be written over by the next large state.
  state_file_ = std::move(state_file);
  RemoveUpdateFilesLocked(*obsolete);
  PruneCheckpointsLocked(r.model_version);
  return Status::Ok();
}

void SqliteStore::SetCheckpointRetention(int64_t keep_last, int64_t keep_every) {
  std::lock_guard<std::mutex> lock(mu_);
  keep_last_ = keep_last;
  keep_every_ = keep_every;
}

void SqliteStore::PruneCheckpointsLocked(uint64_t newest) {
  if (keep_last_ <= 0 || checkpoint_dir_.empty() || newest < static_cast<uint64_t>(keep_last_) + 1) return;
  // Best effort after a commit that succeeded: what fails here is found again next time.
  Stmt find(db_, "SELECT version, file FROM checkpoints WHERE file IS NOT NULL AND version > 0 AND version <= ?");
  if (!find.prepared("find old checkpoints").ok()) return;
  find.Bind(1, static_cast<int64_t>(newest) - keep_last_);
  std::vector<std::pair<int64_t, std::string>> old;
  while (find.Step() == SQLITE_ROW) {
    const int64_t version = find.Int(0);
    if (keep_every_ > 0 && version % keep_every_ == 0) continue;
    old.emplace_back(version, find.Text(1));
  }
  if (old.empty()) return;
  SqliteTransaction transaction(db_);
  if (!transaction.status().ok()) return;
  for (const auto& [version, file] : old) {
    // The row stays (the rounds name their version and its SHA-256); the model goes.
    Stmt st(db_, "UPDATE checkpoints SET file = NULL, bytes = x'' WHERE version = ?");
    st.Bind(1, version);
    if (!RunStatement(db_, st, "drop an old checkpoint").ok()) return;
  }
  if (!transaction.Commit().ok()) return;
  for (const auto& [version, file] : old) {
    if (IsPlainFileName(file)) KeepOrRemoveLocked(checkpoint_dir_, file, &spare_checkpoints_);
  }
}

Status SqliteStore::PutOpenRound(const OpenRoundRecord& r) {
  std::lock_guard<std::mutex> lock(mu_);
  SqliteTransaction transaction(db_);
  PLEXUS_RETURN_IF_ERROR(transaction.status());
  Status s = Exec("DELETE FROM open_round; DELETE FROM open_round_tasks;");
  if (s.ok()) {
    Stmt st(db_, "INSERT INTO open_round(id, round, attempt) VALUES(1, ?, ?)");
    st.Bind(1, static_cast<int64_t>(r.round)).Bind(2, r.attempt);
    s = RunStatement(db_, st, "put open round");
  }
  for (size_t i = 0; s.ok() && i < r.tasks.size(); ++i) {
    Stmt st(db_, "INSERT INTO open_round_tasks(client_id, task_id) VALUES(?, ?)");
    st.Bind(1, r.tasks[i].first).Bind(2, r.tasks[i].second);
    s = RunStatement(db_, st, "put open round task");
  }
  Result<std::vector<std::string>> obsolete = std::vector<std::string>();
  if (s.ok()) {
    obsolete = AcceptedUpdateFilesLocked(" AND round != 0 AND (round != ? OR attempt != ?)",
                                         static_cast<int64_t>(r.round), r.attempt);
    s = obsolete.status();
  }
  if (s.ok()) {
    Stmt st(db_, "DELETE FROM accepted_updates WHERE round != 0 AND (round != ? OR attempt != ?)");
    st.Bind(1, static_cast<int64_t>(r.round)).Bind(2, r.attempt);
    s = RunStatement(db_, st, "drop updates of other rounds");
  }
  PLEXUS_RETURN_IF_ERROR(s);  // the transaction rolls back
  PLEXUS_RETURN_IF_ERROR(transaction.Commit());
  RemoveUpdateFilesLocked(*obsolete);
  return Status::Ok();
}

Result<std::optional<OpenRoundRecord>> SqliteStore::GetOpenRound() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_, "SELECT round, attempt FROM open_round WHERE id = 1");
  PLEXUS_RETURN_IF_ERROR(st.prepared("get open round"));
  int rc = st.Step();
  if (rc == SQLITE_DONE) return std::optional<OpenRoundRecord>();
  if (rc != SQLITE_ROW) return SqliteError(db_, rc, "get open round");
  OpenRoundRecord r;
  r.round = static_cast<uint64_t>(st.Int(0));
  r.attempt = st.Int(1);
  Stmt tasks(db_, "SELECT client_id, task_id FROM open_round_tasks ORDER BY client_id");
  PLEXUS_RETURN_IF_ERROR(tasks.prepared("get open round tasks"));
  while ((rc = tasks.Step()) == SQLITE_ROW) r.tasks.emplace_back(tasks.Text(0), tasks.Text(1));
  if (rc != SQLITE_DONE) return SqliteError(db_, rc, "get open round tasks");
  return std::optional<OpenRoundRecord>(std::move(r));
}

Status SqliteStore::SetRoundEvaluation(uint64_t round, double test_accuracy, double test_loss) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_, "UPDATE rounds SET test_accuracy = ?, test_loss = ? WHERE round = ?");
  st.Bind(1, test_accuracy).Bind(2, test_loss).Bind(3, static_cast<int64_t>(round));
  PLEXUS_RETURN_IF_ERROR(RunStatement(db_, st, "set round evaluation"));
  if (sqlite3_changes(db_) == 0) return NotFoundError("no round " + std::to_string(round));
  return Status::Ok();
}

Status SqliteStore::SetFederatedEvaluation(const RoundRecord& e) {
  if (!e.federated_accuracy || !e.federated_loss) return InvalidArgumentError("no federated evaluation to record");
  std::lock_guard<std::mutex> lock(mu_);
  Stmt known(db_, "SELECT COUNT(*) FROM rounds WHERE model_version = ?");
  known.Bind(1, static_cast<int64_t>(e.model_version));
  PLEXUS_RETURN_IF_ERROR(known.prepared("find round"));
  if (known.Step() != SQLITE_ROW || known.Int(0) == 0) {
    return NotFoundError("no round published version " + std::to_string(e.model_version));
  }
  Stmt st(db_, "INSERT OR REPLACE INTO federated_evaluations VALUES(?,?,?,?,?)");
  st.Bind(1, static_cast<int64_t>(e.model_version))
      .Bind(2, *e.federated_accuracy)
      .Bind(3, *e.federated_loss)
      .Bind(4, e.federated_examples)
      .Bind(5, e.federated_clients);
  return RunStatement(db_, st, "set federated evaluation");
}

Result<std::vector<RoundRecord>> SqliteStore::ListRounds() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_,
          "SELECT round, model_version, model_sha256, num_selected, num_updates, num_dropped, num_examples, "
          "attempts, mean_train_loss, test_accuracy, test_loss, num_refused FROM rounds ORDER BY round");
  PLEXUS_RETURN_IF_ERROR(st.prepared("list rounds"));
  std::vector<RoundRecord> out;
  int rc;
  while ((rc = st.Step()) == SQLITE_ROW) {
    RoundRecord r;
    r.round = static_cast<uint64_t>(st.Int(0));
    r.model_version = static_cast<uint64_t>(st.Int(1));
    r.model_sha256 = st.Text(2);
    r.num_selected = st.Int(3);
    r.num_updates = st.Int(4);
    r.num_dropped = st.Int(5);
    r.num_examples = st.Int(6);
    r.attempts = st.Int(7);
    r.mean_train_loss = st.Double(8);
    if (!st.IsNull(9)) r.test_accuracy = st.Double(9);
    if (!st.IsNull(10)) r.test_loss = st.Double(10);
    r.num_refused = st.IsNull(11) ? 0 : st.Int(11);
    out.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) return SqliteError(db_, rc, "list rounds");
  Stmt federated(db_, "SELECT model_version, accuracy, loss, examples, clients FROM federated_evaluations");
  PLEXUS_RETURN_IF_ERROR(federated.prepared("list federated evaluations"));
  while ((rc = federated.Step()) == SQLITE_ROW) {
    for (RoundRecord& r : out) {
      if (r.model_version != static_cast<uint64_t>(federated.Int(0))) continue;
      r.federated_accuracy = federated.Double(1);
      r.federated_loss = federated.Double(2);
      r.federated_examples = federated.Int(3);
      r.federated_clients = federated.Int(4);
    }
  }
  if (rc != SQLITE_DONE) return SqliteError(db_, rc, "list federated evaluations");
  Stmt merged(db_,
              "SELECT round, client_id, task_id, staleness, grp, ms_per_step, update_sha256 FROM merged_updates "
              "ORDER BY round, position");
  PLEXUS_RETURN_IF_ERROR(merged.prepared("list merged updates"));
  size_t at = 0;  // rounds and their merged updates come in the same order
  while ((rc = merged.Step()) == SQLITE_ROW) {
    const auto round = static_cast<uint64_t>(merged.Int(0));
    while (at < out.size() && out[at].round < round) ++at;
    if (at == out.size() || out[at].round != round) continue;
    MergedUpdate m;
    m.client_id = merged.Text(1);
    m.task_id = merged.Text(2);
    m.staleness = static_cast<uint64_t>(merged.Int(3));
    m.group = static_cast<uint64_t>(merged.Int(4));
    if (!merged.IsNull(5)) m.ms_per_step = merged.Double(5);
    if (!merged.IsNull(6)) m.update_sha256 = merged.Text(6);
    out[at].merged.push_back(std::move(m));
  }
  if (rc != SQLITE_DONE) return SqliteError(db_, rc, "list merged updates");
  return out;
}

Result<ModelState> SqliteStore::CheckpointLocked(uint64_t version) {
  Stmt st(db_, "SELECT sha256, bytes, file FROM checkpoints WHERE version = ?");
  PLEXUS_RETURN_IF_ERROR(st.prepared("read checkpoint"));
  st.Bind(1, static_cast<int64_t>(version));
  const int rc = st.Step();
  if (rc == SQLITE_DONE) return NotFoundError("no checkpoint of version " + std::to_string(version));
  if (rc != SQLITE_ROW) return SqliteError(db_, rc, "read checkpoint");
  Result<ModelState> model = InvalidArgumentError("no checkpoint bytes");
  if (st.IsNull(2) && st.Text(1).empty() && !checkpoint_dir_.empty()) {
    return NotFoundError("the checkpoint of version " + std::to_string(version) +
                         " was deleted by checkpoint retention (plexus server --keep-checkpoints, --keep-every)");
  }
  if (st.IsNull(2)) {
    model = DecodeSafetensors(st.Text(1));
  } else if (!IsPlainFileName(st.Text(2))) {
    return DataLossError("checkpoint " + std::to_string(version) + " names '" + st.Text(2) +
                         "', not a file of its folder");
  } else {
    const std::string file = checkpoint_dir_ + "/" + st.Text(2);
    model = ReadSafetensorsFile(file);
    if (model.status().code() == StatusCode::kNotFound) {
      return DataLossError("checkpoint " + std::to_string(version) + " is missing: " + model.status().message());
    }
  }
  if (!model.ok())
    return DataLossError("checkpoint " + std::to_string(version) + " is corrupt: " + model.status().message());
  if (model->ContentSha256() != st.Text(0)) {
    return DataLossError("checkpoint " + std::to_string(version) + " does not match its stored SHA-256");
  }
  model->set_version(version);
  return model;
}

Result<std::optional<ModelState>> SqliteStore::LatestCheckpoint() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_, "SELECT MAX(version) FROM checkpoints");
  PLEXUS_RETURN_IF_ERROR(st.prepared("latest checkpoint"));
  const int rc = st.Step();
  if (rc != SQLITE_ROW) return SqliteError(db_, rc, "latest checkpoint");
  if (st.IsNull(0)) return std::optional<ModelState>();
  PLEXUS_ASSIGN_OR_RETURN(ModelState m, CheckpointLocked(static_cast<uint64_t>(st.Int(0))));
  return std::optional<ModelState>(std::move(m));
}

Result<std::string> SqliteStore::AggregatorState() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_, "SELECT state, file FROM aggregator_state WHERE id = 0");
  PLEXUS_RETURN_IF_ERROR(st.prepared("strategy state"));
  const int rc = st.Step();
  if (rc == SQLITE_DONE) return std::string();
  if (rc != SQLITE_ROW) return SqliteError(db_, rc, "strategy state");
  if (st.IsNull(1)) return st.Text(0);
  const std::string name = st.Text(1);
  if (name != sqlite_store::kStateFileNames[0] && name != sqlite_store::kStateFileNames[1]) {
    return DataLossError("the strategy state's row names '" + name + "', which is not a state file");
  }
  const std::string path = checkpoint_dir_ + "/" + name;
  Result<std::string> contents = ReadFileContents(path);
  if (!contents.ok()) return DataLossError("the strategy state's file: " + contents.status().message());
  const std::string_view bytes = *contents;
  const size_t header = sqlite_store::kStateFileHeaderBytes;
  if (bytes.size() < header ||
      std::memcmp(bytes.data(), sqlite_store::kStateFileMagic, sizeof sqlite_store::kStateFileMagic) != 0 ||
      GetLittleEndian(bytes.data() + 8, 8) != bytes.size() - header ||
      GetLittleEndian(bytes.data() + 16, 4) != Crc32c(bytes.substr(header))) {
    return DataLossError("the strategy state's file '" + path + "' is damaged (its size or CRC-32C does not match)");
  }
  contents->erase(0, header);  // in place: no second state-sized string
  return std::move(contents).value();
}

Result<ModelState> SqliteStore::Checkpoint(uint64_t version) {
  std::lock_guard<std::mutex> lock(mu_);
  return CheckpointLocked(version);
}

Result<std::vector<uint64_t>> SqliteStore::CheckpointVersions() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt st(db_, "SELECT version FROM checkpoints WHERE file IS NOT NULL OR length(bytes) > 0 ORDER BY version");
  PLEXUS_RETURN_IF_ERROR(st.prepared("list checkpoints"));
  std::vector<uint64_t> out;
  int rc;
  while ((rc = st.Step()) == SQLITE_ROW) out.push_back(static_cast<uint64_t>(st.Int(0)));
  if (rc != SQLITE_DONE) return SqliteError(db_, rc, "list checkpoints");
  return out;
}

}  // namespace plexus
