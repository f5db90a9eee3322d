// SqliteStore's accepted updates: a sync round's updates (rows of the open round and attempt)
// and the asynchronous modes' update log (rows of round kLogRound), each row's values in a file of
// the updates folder (float32 safetensors, or a codec's bytes), written and synced before the
// row that names it commits.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/atomic_file.h"
#include "core/file_contents.h"
#include "core/safetensors.h"
#include "server/store/sqlite_store.h"
#include "server/store/sqlite_store_files.h"
#include "sqlite/sqlite_statement.h"

namespace plexus {
namespace {

using Stmt = SqliteStatement;
using sqlite_store::IsPlainFileName;
using sqlite_store::kLogRound;

// A failed insert of a log entry whose sequence number is taken is AlreadyExists.
Status UniqueRow(Status s, int64_t round, int64_t attempt) {
  if (s.ok() || round != kLogRound || s.message().find("UNIQUE") == std::string::npos) return s;
  return AlreadyExistsError("update log entry " + std::to_string(attempt) + " is taken");
}

// A name no other accepted update has had (`tag` random): a replaced update's file must not be
// overwritten before the row naming its successor commits. A coded update's file holds its
// codec's bytes (".codes").
std::string AcceptedUpdateFileName(uint64_t round, int64_t attempt, uint64_t tag, bool coded) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(tag));
  return "r" + std::to_string(round) + "-a" + std::to_string(attempt) + "-" + hex + (coded ? ".codes" : ".safetensors");
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
    if (!IsPlainFileName(name)) continue;
    std::error_code ec;
    std::filesystem::remove(updates_dir_ + "/" + name, ec);
  }
}

Status SqliteStore::PutAcceptedUpdate(uint64_t round, int64_t attempt, const Update& u) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt open(db_, "SELECT 1 FROM open_round WHERE id = 1 AND round = ? AND attempt = ?");
  PLEXUS_RETURN_IF_ERROR(open.prepared("check open round"));
  open.Bind(1, static_cast<int64_t>(round)).Bind(2, attempt);
  if (open.Step() != SQLITE_ROW) {
    return FailedPreconditionError("round " + std::to_string(round) + " attempt " + std::to_string(attempt) +
                                   " is not the open round");
  }
  return PutUpdateRowLocked(static_cast<int64_t>(round), attempt, u, /*replace=*/true);
}

Status SqliteStore::LogUpdate(uint64_t seq, const Update& u) {
  std::lock_guard<std::mutex> lock(mu_);
  return PutUpdateRowLocked(kLogRound, static_cast<int64_t>(seq), u, /*replace=*/false);
}

Status SqliteStore::PutUpdateRowLocked(int64_t round, int64_t attempt, const Update& u, bool replace) {
  Stmt st(db_, replace ? "INSERT OR REPLACE INTO accepted_updates(round, attempt, client_id, task_id, base_version, "
                         "num_examples, local_steps, train_loss, delta, file, codec) VALUES(?,?,?,?,?,?,?,?,?,?,?)"
                       : "INSERT INTO accepted_updates(round, attempt, client_id, task_id, base_version, "
                         "num_examples, local_steps, train_loss, delta, file, codec) VALUES(?,?,?,?,?,?,?,?,?,?,?)");
  st.Bind(1, round).Bind(2, attempt).Bind(3, u.client_id).Bind(4, u.task_id);
  st.Bind(5, static_cast<int64_t>(u.base_version)).Bind(6, u.num_examples).Bind(7, u.local_steps);
  auto loss = u.metrics.find("train_loss");
  st.BindOptional(8, loss == u.metrics.end() ? std::optional<double>() : std::optional<double>(loss->second));
  const std::string what =
      round == kLogRound ? "log update " + std::to_string(attempt) : std::string("put accepted update");
  // A coded update is kept as it came (its codec's bytes, a quarter of float32's for int8).
  if (u.coded) st.Bind(11, u.coded->codec());
  if (updates_dir_.empty()) {
    const std::string delta = u.coded ? std::string() : EncodeSafetensors(u.delta);
    st.BindBlobNoCopy(9, u.coded ? std::string_view(u.coded->bytes()) : std::string_view(delta));
    return UniqueRow(RunStatement(db_, st, what), round, attempt);
  }
  // As with checkpoints: the file is durable before the row naming it commits. The update this
  // one replaces (a client's second upload in the attempt) keeps its own file until then.
  std::vector<std::string> replaced;
  if (replace) {
    Stmt previous(db_, "SELECT file FROM accepted_updates WHERE round = ? AND attempt = ? AND client_id = ?");
    PLEXUS_RETURN_IF_ERROR(previous.prepared("find accepted update"));
    previous.Bind(1, round).Bind(2, attempt).Bind(3, u.client_id);
    if (previous.Step() == SQLITE_ROW && !previous.IsNull(0)) replaced.push_back(previous.Text(0));
  }
  PLEXUS_RETURN_IF_ERROR(EnsureDirLocked(updates_dir_, &updates_dir_ready_));
  const std::string name =
      AcceptedUpdateFileName(static_cast<uint64_t>(round), attempt, name_rng_(), u.coded != nullptr);
  PLEXUS_RETURN_IF_ERROR(u.coded ? WriteFileAtomically(updates_dir_ + "/" + name, {u.coded->bytes()})
                                 : WriteSafetensorsFile(updates_dir_ + "/" + name, u.delta));
  st.BindBlob(9, std::string()).Bind(10, name);
  if (Status s = RunStatement(db_, st, what); !s.ok()) {
    RemoveUpdateFilesLocked({name});
    return UniqueRow(s, round, attempt);
  }
  RemoveUpdateFilesLocked(replaced);
  return Status::Ok();
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
