// SqliteStore's accepted updates: a sync round's updates (rows of the open round and attempt)
// and the asynchronous modes' update log (rows of round kLogRound), each row's values in a file of
// the updates folder (float32 safetensors, or a codec's bytes), written and synced before the
// row that names it commits. Rows are group-committed: callers that arrive while a commit runs
// share the next one.
#include <algorithm>
#include <cstring>
#include <filesystem>

#include "core/atomic_file.h"
#include "core/file_contents.h"
#include "core/safetensors.h"
#include "core/value_bytes.h"
#include "server/store/sqlite_store.h"
#include "server/store/sqlite_store_files.h"
#include "sqlite/sqlite_statement.h"

namespace plexus {
namespace {

using Stmt = SqliteStatement;
using sqlite_store::HexTag;
using sqlite_store::IsPlainFileName;
using sqlite_store::kLogRound;
using sqlite_store::NewUpdateFileName;
using sqlite_store::StoredFilePrefix;

// A failed insert of a log entry whose sequence number is taken is AlreadyExists.
Status UniqueRow(Status s, int64_t round, int64_t attempt) {
  if (s.ok() || round != kLogRound || s.message().find("UNIQUE") == std::string::npos) return s;
  return AlreadyExistsError("update log entry " + std::to_string(attempt) + " is taken");
}

}  // namespace

Result<std::vector<std::string>> SqliteStore::AcceptedUpdateFilesLocked(const char* where, int64_t round,
                                                                        int64_t attempt) {
  const std::string sql = std::string("SELECT file FROM accepted_updates WHERE file IS NOT NULL") + where;
  Stmt st(db_, sql.c_str());
  PLEXUS_RETURN_IF_ERROR(st.prepared("list accepted update files"));
  const int params = static_cast<int>(std::count(where, where + std::strlen(where), '?'));
  if (params >= 1) st.Bind(1, round);
  if (params >= 2) st.Bind(2, attempt);
  std::vector<std::string> out;
  int rc;
  while ((rc = st.Step()) == SQLITE_ROW) out.push_back(st.Text(0));
  if (rc != SQLITE_DONE) return SqliteError(db_, rc, "list accepted update files");
  return out;
}

void SqliteStore::RemoveUpdateFilesLocked(const std::vector<std::string>& names) {
  // After the commit that dropped their rows; a crash before this leaves orphans for Open.
  for (const std::string& name : names) {
    if (mapped_ && mapped_->Forget(name)) continue;  // its pool keeps it (mapped) or removes it
    if (IsPlainFileName(name)) KeepOrRemoveLocked(updates_dir_, name, &spare_updates_);
  }
}

std::shared_ptr<LargeBlockSource> SqliteStore::UpdateMemory() {
  std::lock_guard<std::mutex> lock(mu_);
  if (mapping_decided_) return mapped_;
  mapping_decided_ = true;
  if (updates_dir_.empty() || mapping_ == UpdateFileMapping::kNever) return nullptr;
  if (!EnsureDirLocked(updates_dir_, &updates_dir_ready_).ok()) return nullptr;  // the heap, then
  if (mapping_ == UpdateFileMapping::kAlways || OnInMemoryFileSystem(updates_dir_)) {
    mapped_ = std::make_shared<MappedUpdateFiles>(updates_dir_, kMaxSpareFiles, kMaxSpareBytes);
  }
  return mapped_;
}

std::shared_ptr<MappedUpdateFiles> SqliteStore::MappedUpdateFilesForTest() {
  std::lock_guard<std::mutex> lock(mu_);
  return mapped_;
}

void SqliteStore::KeepOrRemoveLocked(const std::string& dir, const std::string& name, SparePool* pool) {
  const std::string path = dir + "/" + name;
  std::error_code ec;
  const uintmax_t bytes = std::filesystem::file_size(path, ec);
  if (!ec && pool->files.size() < kMaxSpareFiles && pool->bytes + bytes <= kMaxSpareBytes) {
    const std::string spare = pool->renamed ? "spare-" + HexTag(name_rng_()) : name;
    if (pool->renamed) std::filesystem::rename(path, dir + "/" + spare, ec);
    if (!ec) {
      pool->files.push_back({spare, bytes});
      pool->bytes += bytes;
      return;
    }
  }
  std::filesystem::remove(path, ec);
}

std::optional<SqliteStore::SpareFile> SqliteStore::PopSpareLocked(SparePool* pool) {
  if (pool->files.empty()) return std::nullopt;
  SpareFile spare = std::move(pool->files.back());
  pool->files.pop_back();
  pool->bytes -= spare.bytes;
  return spare;
}

bool SqliteStore::TakeSpareFileLocked(const std::string& dir, SparePool* pool, const std::string& path) {
  while (std::optional<SpareFile> spare = PopSpareLocked(pool)) {
    std::error_code ec;
    std::filesystem::rename(dir + "/" + spare->name, path, ec);
    if (!ec) return true;
  }
  return false;
}

Status SqliteStore::PutAcceptedUpdate(uint64_t round, int64_t attempt, const Update& u) {
  return PutUpdateRow(static_cast<int64_t>(round), attempt, u, /*replace=*/true);
}

Status SqliteStore::LogUpdate(uint64_t seq, const Update& u) {
  return PutUpdateRow(kLogRound, static_cast<int64_t>(seq), u, /*replace=*/false);
}

Status SqliteStore::PutUpdateRow(int64_t round, int64_t attempt, const Update& u, bool replace) {
  PendingUpdateRow row;
  row.round = round;
  row.attempt = attempt;
  row.update = &u;
  row.replace = replace;
  std::shared_ptr<MappedUpdateFiles> mapped;
  if (!updates_dir_.empty() && !u.coded) {
    std::lock_guard<std::mutex> lock(mu_);
    mapped = mapped_;
  }
  if (mapped) {
    // Decoded into one of the folder's files (UpdateMemory): only its header is written.
    PLEXUS_ASSIGN_OR_RETURN(std::optional<std::string> name,
                            mapped->Log(u.delta.data().data(), u.delta.num_bytes(), StoredFilePrefix(u.delta)));
    if (name) {
      row.file = std::move(*name);
      row.mapped = true;
    }
  }
  if (!updates_dir_.empty() && !row.mapped) {
    // The file first, without the store's lock: uploads that finish together write theirs at
    // once, and a name no other update has had means nobody reads it before its row names it.
    std::string path;
    {
      std::lock_guard<std::mutex> lock(mu_);
      PLEXUS_RETURN_IF_ERROR(EnsureDirLocked(updates_dir_, &updates_dir_ready_));
      // A spare's name is durable already; a new file's is made so by the folder sync before any
      // row names it.
      if (std::optional<SpareFile> spare = PopSpareLocked(&spare_updates_)) {
        row.file = spare->name;
      } else {
        row.file = NewUpdateFileName(name_rng_());
        row.new_file = true;
      }
      path = updates_dir_ + "/" + row.file;
    }
    PLEXUS_RETURN_IF_ERROR(u.coded ? WriteFileInPlaceSynced(path, {u.coded->bytes()})
                                   : WriteFileInPlaceSynced(path, {StoredFilePrefix(u.delta), ValueBytes(u.delta)}));
  }
  // Group commit: the first caller to find no commit running commits every row queued by then
  // (one directory sync, one transaction, one WAL sync); the others wait for the commit that
  // takes theirs.
  std::unique_lock<std::mutex> queue_lock(row_queue_mu_);
  row_queue_.push_back(&row);
  while (!row.done) {
    if (committing_rows_) {
      row_queue_cv_.wait(queue_lock);
      continue;
    }
    committing_rows_ = true;
    std::vector<PendingUpdateRow*> batch;
    batch.swap(row_queue_);
    queue_lock.unlock();
    CommitUpdateRows(batch);
    queue_lock.lock();
    for (PendingUpdateRow* done : batch) done->done = true;
    committing_rows_ = false;
    row_queue_cv_.notify_all();
  }
  return row.result;
}

size_t SqliteStore::QueuedUpdateRows() {
  std::lock_guard<std::mutex> lock(row_queue_mu_);
  return row_queue_.size();
}

std::vector<std::string> SqliteStore::SpareUpdateFiles() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> names;
  for (const SpareFile& spare : spare_updates_.files) names.push_back(spare.name);
  return names;
}

uint64_t SqliteStore::UpdateFolderSyncs() {
  std::lock_guard<std::mutex> lock(mu_);
  return update_folder_syncs_;
}

void SqliteStore::GiveBackUpdateFileLocked(PendingUpdateRow* row) {
  if (row->file.empty()) return;
  if (row->mapped) {
    mapped_->Forget(row->file);
  } else if (row->new_file) {
    std::error_code ec;
    std::filesystem::remove(updates_dir_ + "/" + row->file, ec);
  } else {
    RemoveUpdateFilesLocked({row->file});
  }
  row->file.clear();
}

void SqliteStore::CommitUpdateRows(const std::vector<PendingUpdateRow*>& rows) {
  if (row_commit_hook_) row_commit_hook_(rows.size());
  std::lock_guard<std::mutex> lock(mu_);
  auto fail_all = [&](const Status& why) {
    for (PendingUpdateRow* row : rows) {
      if (row->result.ok()) row->result = why;
      GiveBackUpdateFileLocked(row);
    }
  };
  bool any_new_file = false;
  for (const PendingUpdateRow* row : rows) any_new_file = any_new_file || row->new_file;
  if (any_new_file) {
    // One sync makes every new file's name durable before any row names it.
    if (Status synced = SyncDirectory(updates_dir_); !synced.ok()) return fail_all(synced);
    ++update_folder_syncs_;
    for (PendingUpdateRow* row : rows) row->new_file = false;
  }
  SqliteTransaction transaction(db_);
  if (!transaction.status().ok()) return fail_all(transaction.status());
  std::vector<std::string> replaced;
  for (PendingUpdateRow* row : rows) {
    // A row that fails (a taken sequence number, a round no longer open) is undone alone.
    if (Status s = Exec("SAVEPOINT update_row"); !s.ok()) return fail_all(s);
    row->result = InsertUpdateRowLocked(*row, &replaced);
    if (!row->result.ok()) {
      (void)Exec("ROLLBACK TO update_row");
      GiveBackUpdateFileLocked(row);
    }
    if (Status s = Exec("RELEASE update_row"); !s.ok()) return fail_all(s);
  }
  if (Status committed = transaction.Commit(); !committed.ok()) return fail_all(committed);
  // The updates these rows replaced keep their files until the rows naming their successors commit.
  RemoveUpdateFilesLocked(replaced);
}

Status SqliteStore::InsertUpdateRowLocked(const PendingUpdateRow& row, std::vector<std::string>* replaced) {
  const Update& u = *row.update;
  if (row.replace) {
    Stmt open(db_, "SELECT 1 FROM open_round WHERE id = 1 AND round = ? AND attempt = ?");
    PLEXUS_RETURN_IF_ERROR(open.prepared("check open round"));
    open.Bind(1, row.round).Bind(2, row.attempt);
    if (open.Step() != SQLITE_ROW) {
      return FailedPreconditionError("round " + std::to_string(row.round) + " attempt " + std::to_string(row.attempt) +
                                     " is not the open round");
    }
    // A client's second upload in the attempt replaces its first.
    Stmt previous(db_, "SELECT file FROM accepted_updates WHERE round = ? AND attempt = ? AND client_id = ?");
    PLEXUS_RETURN_IF_ERROR(previous.prepared("find accepted update"));
    previous.Bind(1, row.round).Bind(2, row.attempt).Bind(3, u.client_id);
    if (previous.Step() == SQLITE_ROW && !previous.IsNull(0)) replaced->push_back(previous.Text(0));
  }
  Stmt st(db_, row.replace
                   ? "INSERT OR REPLACE INTO accepted_updates(round, attempt, client_id, task_id, base_version, "
                     "num_examples, local_steps, train_loss, delta, file, codec) VALUES(?,?,?,?,?,?,?,?,?,?,?)"
                   : "INSERT INTO accepted_updates(round, attempt, client_id, task_id, base_version, "
                     "num_examples, local_steps, train_loss, delta, file, codec) VALUES(?,?,?,?,?,?,?,?,?,?,?)");
  st.Bind(1, row.round).Bind(2, row.attempt).Bind(3, u.client_id).Bind(4, u.task_id);
  st.Bind(5, static_cast<int64_t>(u.base_version)).Bind(6, u.num_examples).Bind(7, u.local_steps);
  auto loss = u.metrics.find("train_loss");
  st.BindOptional(8, loss == u.metrics.end() ? std::optional<double>() : std::optional<double>(loss->second));
  const std::string what =
      row.round == kLogRound ? "log update " + std::to_string(row.attempt) : std::string("put accepted update");
  // A coded update is kept as it came (its codec's bytes, a quarter of float32's for int8).
  if (u.coded) st.Bind(11, u.coded->codec());
  if (row.file.empty()) {  // no updates folder: the values in the row
    const std::string delta = u.coded ? std::string() : EncodeSafetensors(u.delta);
    st.BindBlobNoCopy(9, u.coded ? std::string_view(u.coded->bytes()) : std::string_view(delta));
    return UniqueRow(RunStatement(db_, st, what), row.round, row.attempt);
  }
  st.BindBlob(9, std::string()).Bind(10, row.file);
  return UniqueRow(RunStatement(db_, st, what), row.round, row.attempt);
}

void SqliteStore::SetCodedDeltaReader(CodedDeltaReader reader) {
  std::lock_guard<std::mutex> lock(mu_);
  coded_reader_ = std::move(reader);
}

Result<std::shared_ptr<const CodedDelta>> SqliteStore::ReadCodedRowLocked(const std::string& codec, std::string bytes,
                                                                          const std::string& file) {
  if (!coded_reader_) {
    return FailedPreconditionError("it is kept in codec '" + codec +
                                   "', and this store was opened without a reader of coded updates");
  }
  if (!file.empty()) {
    if (!IsPlainFileName(file)) return InvalidArgumentError("it names '" + file + "', not a file of its folder");
    PLEXUS_ASSIGN_OR_RETURN(bytes, ReadFileContents(updates_dir_ + "/" + file));
  }
  return coded_reader_(codec, std::move(bytes));
}

Result<std::vector<Update>> SqliteStore::ListAcceptedUpdates(uint64_t round, int64_t attempt) {
  std::lock_guard<std::mutex> lock(mu_);
  PLEXUS_ASSIGN_OR_RETURN(std::vector<LoggedUpdate> rows,
                          UpdateRowsLocked(static_cast<int64_t>(round), attempt, "ORDER BY client_id"));
  std::vector<Update> out;
  out.reserve(rows.size());
  for (LoggedUpdate& row : rows) out.push_back(std::move(row.update));
  return out;
}

Result<std::vector<LoggedUpdate>> SqliteStore::ListLoggedUpdates() {
  std::lock_guard<std::mutex> lock(mu_);
  return UpdateRowsLocked(kLogRound, -1, "ORDER BY attempt");
}

Result<std::vector<LoggedUpdate>> SqliteStore::UpdateRowsLocked(int64_t round, int64_t attempt, const char* order) {
  const std::string sql =
      std::string(
          "SELECT client_id, task_id, base_version, num_examples, local_steps, train_loss, delta, file, attempt, codec "
          "FROM accepted_updates WHERE round = ?") +
      (attempt >= 0 ? " AND attempt = ? " : " ") + order;
  Stmt st(db_, sql.c_str());
  PLEXUS_RETURN_IF_ERROR(st.prepared("list accepted updates"));
  st.Bind(1, round);
  if (attempt >= 0) st.Bind(2, attempt);
  std::vector<LoggedUpdate> out;
  int rc;
  while ((rc = st.Step()) == SQLITE_ROW) {
    LoggedUpdate row;
    Update& u = row.update;
    u.client_id = st.Text(0);
    u.task_id = st.Text(1);
    u.base_version = static_cast<uint64_t>(st.Int(2));
    u.num_examples = st.Int(3);
    u.local_steps = st.Int(4);
    if (!st.IsNull(5)) u.metrics["train_loss"] = st.Double(5);
    row.seq = static_cast<uint64_t>(st.Int(8));
    if (!st.IsNull(9)) {
      Result<std::shared_ptr<const CodedDelta>> coded =
          ReadCodedRowLocked(st.Text(9), st.Text(6), st.IsNull(7) ? std::string() : st.Text(7));
      if (!coded.ok())
        return DataLossError("accepted update of " + u.client_id + " is lost: " + coded.status().message());
      u.coded = std::move(coded).value();
      out.push_back(std::move(row));
      continue;
    }
    Result<ModelState> delta =
        st.IsNull(7) ? DecodeSafetensors(st.Text(6))
        : IsPlainFileName(st.Text(7))
            ? ReadSafetensorsFile(updates_dir_ + "/" + st.Text(7))
            : Result<ModelState>(InvalidArgumentError("it names '" + st.Text(7) + "', not a file of its folder"));
    if (!delta.ok())
      return DataLossError("accepted update of " + u.client_id + " is lost: " + delta.status().message());
    u.delta = std::move(delta).value();
    out.push_back(std::move(row));
  }
  if (rc != SQLITE_DONE) return SqliteError(db_, rc, "list accepted updates");
  return out;
}

}  // namespace plexus
