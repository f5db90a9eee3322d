// SqliteStore: the server's Store in one SQLite file (WAL mode, synchronous=FULL) and, next to it,
// two folders of safetensors files: `<path>.checkpoints/` (one per model version) and
// `<path>.updates/` (the accepted updates of the open round in sync mode, the update log of the asynchronous modes).
// Every state change is one transaction. A model's file is written atomically and synced before the row that names it
// commits, so a model the database knows is on disk whole (checkpoints also carry their SHA-256,
// verified on read); files whose rows are deleted go after the commit, and any a crash left
// behind are removed when the database is next opened by an owner (kExclusive), never by a
// reader, which may run beside a server whose spare files no row names. Models live outside
// the database because SQLite would copy a model-sized blob several times (into a record, its
// pages, the WAL, then the database file); a file is written once, straight from the model. An
// in-memory database (":memory:") keeps models inline, as databases written before the folders
// existed do; both are read. An update that arrived coded (Update::coded: int8, top-k, fp16 or bf16 into the
// averaging family) is kept as its codec's bytes (a ".codes" file, or the row), with the codec's
// spec in its row, and read back through the CodedDeltaReader the server sets.
// Thread-safe (one connection behind a mutex).
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "server/store/mapped_update_files.h"
#include "server/store/store.h"

struct sqlite3;

namespace plexus {

class SqliteStore final : public Store {
 public:
  // kExclusive: the opener owns the database (a server). It holds an exclusive lock on the file
  // (flock, released when the store closes or the process dies, also by SIGKILL) for as long as
  // the store is open, so a second server on the same database is refused at start instead of
  // taking over the first one's open round. kShared: a reader next to a running owner
  // (`plexus export`, tests peeking at a server's progress); it takes no lock.
  enum class Access { kShared, kExclusive };

  // Opens or creates the database at `path` (created 0600: it holds the federation's state).
  // Unavailable when the file cannot be opened; FailedPrecondition when `access` is kExclusive
  // and another process holds the database; DataLoss when it is not a Plexus database.
  static Result<std::unique_ptr<SqliteStore>> Open(const std::string& path, Access access = Access::kShared);
  ~SqliteStore() override;

  // Checkpoint retention: after each commit, the model files of versions older than the newest
  // `keep_last` are deleted, except version 0 and every `keep_every`-th version (0: none of
  // those). Their rows stay (rounds name them); reading one is NotFound saying so, and
  // CheckpointVersions lists only the versions still held. keep_last 0 keeps everything (the
  // default). Databases without a checkpoint folder (":memory:") keep everything.
  void SetCheckpointRetention(int64_t keep_last, int64_t keep_every);
  // How to read back updates that were stored coded (Update::coded, kept as their codec's
  // bytes): without a reader, listing them fails with DataLoss naming the codec.
  void SetCodedDeltaReader(CodedDeltaReader reader);
  // Tests of the group commit: `hook` is called with the number of update rows (PutAcceptedUpdate,
  // LogUpdate) about to be committed together, by the thread that commits them, before it does;
  // set before the store is used. QueuedUpdateRows: rows waiting for the next commit.
  void SetUpdateRowCommitHook(std::function<void(size_t)> hook) { row_commit_hook_ = std::move(hook); }
  size_t QueuedUpdateRows();
  // The updates folder's files kept for reuse (named by no row), and how often the folder was
  // synced so far: a group commit syncs it only when one of its files is new. For tests.
  std::vector<std::string> SpareUpdateFiles();
  uint64_t UpdateFolderSyncs();
  // Whether UpdateMemory lends the updates folder's files (MappedUpdateFiles): by default only
  // where the folder is in memory (tmpfs, ramfs), where the copy into the file was what logging
  // cost; on a disk the direct writer sends the update from its own memory already. kAlways and
  // kNever for tests. Set before the store is used.
  enum class UpdateFileMapping { kWhereInMemory, kAlways, kNever };
  void SetUpdateFileMapping(UpdateFileMapping mapping) { mapping_ = mapping; }
  // The pool behind UpdateMemory, once it was asked for and is on; null otherwise. For tests.
  std::shared_ptr<MappedUpdateFiles> MappedUpdateFilesForTest();

  std::shared_ptr<LargeBlockSource> UpdateMemory() override;

  Status PutMeta(const std::string& key, const std::string& value) override;
  Result<std::string> GetMeta(const std::string& key) override;
  Status PutClient(const ClientRecord& client) override;
  Result<std::vector<ClientRecord>> ListClients() override;
  Status PutCheckpoint(const ModelState& model) override;
  Status CommitRound(const RoundRecord& round, const ModelState& model, std::string_view aggregator_state) override;
  Status PrepareCheckpoint(const ModelState& model) override;
  Result<std::string> AggregatorState() override;
  Status PutOpenRound(const OpenRoundRecord& round) override;
  Result<std::optional<OpenRoundRecord>> GetOpenRound() override;
  Status PutAcceptedUpdate(uint64_t round, int64_t attempt, const Update& update) override;
  Result<std::vector<Update>> ListAcceptedUpdates(uint64_t round, int64_t attempt) override;
  Status LogUpdate(uint64_t seq, const Update& update) override;
  Result<std::vector<LoggedUpdate>> ListLoggedUpdates() override;
  Status SetRoundEvaluation(uint64_t round, double test_accuracy, double test_loss) override;
  Status SetFederatedEvaluation(const RoundRecord& evaluation) override;
  Result<std::vector<RoundRecord>> ListRounds() override;
  Result<std::optional<ModelState>> LatestCheckpoint() override;
  Result<ModelState> Checkpoint(uint64_t version) override;
  Result<std::vector<uint64_t>> CheckpointVersions() override;

 private:
  SqliteStore(sqlite3* db, std::string checkpoint_dir, std::string updates_dir)
      : checkpoint_dir_(std::move(checkpoint_dir)),
        updates_dir_(std::move(updates_dir)),
        db_(db),
        name_rng_(std::random_device{}()) {}
  Status Exec(const char* sql);
  // known_sha256: the model's ContentSha256 when the caller has it (a round's record carries it;
  // hashing a large model twice costs as much as receiving an update), else empty.
  // file_written: PrepareCheckpoint wrote this model's file already.
  Status PutCheckpointLocked(const ModelState& model, std::string_view known_sha256 = {}, bool file_written = false);
  // The checkpoint's file of `model`, durable (temporary file, sync, rename), over a pruned
  // checkpoint's file where there is one. Returns its name in checkpoint_dir_.
  Result<std::string> WriteCheckpointFileLocked(const ModelState& model);
  // A strategy state of kStateFileMinBytes or more (a server optimizer's moments: 8 or 16 bytes
  // per parameter) goes to a file in checkpoint_dir_, not into its row: through SQLite it was
  // written twice (the WAL, then the checkpoint of the WAL into the database) a page at a time,
  // most of a round's close with FedAdam. Two names in turn: the file the committed row names
  // stays whole until the next commit names the other, which is written over in place (its
  // blocks and pages reused) and synced first. Returns the name written.
  Result<std::string> WriteStateFileLocked(std::string_view state);
  // The SHA-256 stored with `version`'s checkpoint; nullopt when there is none.
  Result<std::optional<std::string>> StoredCheckpointSha256Locked(uint64_t version);
  Result<ModelState> CheckpointLocked(uint64_t version);
  // Creates `dir` (and syncs its parent) once.
  Status EnsureDirLocked(const std::string& dir, bool* ready);
  // File names of the accepted updates matching `where` (empty, or " AND ..." with two
  // parameters, round and attempt).
  Result<std::vector<std::string>> AcceptedUpdateFilesLocked(const char* where, int64_t round, int64_t attempt);
  void RemoveUpdateFilesLocked(const std::vector<std::string>& names);
  // An accepted (sync) or logged (async) update on its way into the database, queued for the
  // next group commit by the thread that waits for it.
  struct PendingUpdateRow {
    int64_t round = 0;
    int64_t attempt = 0;
    const Update* update = nullptr;
    bool replace = false;   // sync rounds: a client's later upload replaces its earlier one
    std::string file;       // in the updates folder, written and synced; empty: values in the row
    bool new_file = false;  // `file` is not a spare's: its name is durable only after a folder sync
    bool mapped = false;    // `file` is one of mapped_'s, the update's own memory
    Status result;
    bool done = false;  // guarded by row_queue_mu_
  };
  // Writes an accepted (sync) or logged (async) update: its file, synced, then its row, committed
  // together with the rows of every caller that arrives meanwhile.
  Status PutUpdateRow(int64_t round, int64_t attempt, const Update& update, bool replace);
  // One transaction for `rows` (after one sync of the updates folder when a row's file is new);
  // sets each row's result.
  void CommitUpdateRows(const std::vector<PendingUpdateRow*>& rows);
  Status InsertUpdateRowLocked(const PendingUpdateRow& row, std::vector<std::string>* replaced);
  // The file of a row that did not commit: kept as a spare when its name is durable, else
  // removed. Requires mu_.
  void GiveBackUpdateFileLocked(PendingUpdateRow* row);
  // Files whose rows are gone (merged updates, pruned checkpoints), reused for new files of the
  // same kind: writing over a file's blocks in place costs the file system no allocation (and
  // tmpfs no fresh pages). A pruned checkpoint's file is renamed "spare-..." (a checkpoint's name
  // says its version). An update's file keeps its name, which its next row names again: no rename
  // for the file system to journal, and no folder sync before that row commits, since the name
  // is already durable (update files are read only by the store's owner, after their rows commit;
  // a file joins the pool only once the commit that dropped its row is done). A crash leaves
  // spares as orphans, which Open removes.
  struct SpareFile {
    std::string name;
    uintmax_t bytes = 0;
  };
  struct SparePool {
    bool renamed = false;  // spares renamed "spare-..." (checkpoints); else kept under their names
    std::vector<SpareFile> files;
    uintmax_t bytes = 0;
  };
  static constexpr size_t kMaxSpareFiles = 32;  // per pool
  static constexpr uintmax_t kMaxSpareBytes = uintmax_t{1} << 30;
  // Keeps `dir`/`name` in `pool` as a spare while the pool is small, else removes it. Requires mu_.
  void KeepOrRemoveLocked(const std::string& dir, const std::string& name, SparePool* pool);
  // The newest spare of `pool`, taken out of it; none when the pool is empty. Requires mu_.
  std::optional<SpareFile> PopSpareLocked(SparePool* pool);
  // Renames a spare of `pool` to `path`, to be written over in place; false when there is none.
  // Requires mu_.
  bool TakeSpareFileLocked(const std::string& dir, SparePool* pool, const std::string& path);
  // A coded row's delta from its bytes (inline, or in `file` when that is not empty).
  Result<std::shared_ptr<const CodedDelta>> ReadCodedRowLocked(const std::string& codec, std::string bytes,
                                                               const std::string& file);
  // Rows of `round` (and `attempt` when >= 0) in `order`, with their attempt as seq.
  Result<std::vector<LoggedUpdate>> UpdateRowsLocked(int64_t round, int64_t attempt, const char* order);

  const std::string checkpoint_dir_;  // empty: checkpoints inline in the database
  const std::string updates_dir_;     // empty: accepted updates inline in the database
  std::mutex mu_;
  sqlite3* db_;                        // guarded by mu_
  bool checkpoint_dir_ready_ = false;  // guarded by mu_
  bool updates_dir_ready_ = false;     // guarded by mu_
  std::mt19937_64 name_rng_;           // guarded by mu_; names accepted-update files
  int lock_fd_ = -1;                   // the database file, flock-ed, when opened kExclusive
  int64_t keep_last_ = 0;              // guarded by mu_; checkpoint retention
  int64_t keep_every_ = 0;             // guarded by mu_
  CodedDeltaReader coded_reader_;      // guarded by mu_
  SparePool spare_updates_;            // guarded by mu_
  uint64_t update_folder_syncs_ = 0;   // guarded by mu_
  SparePool spare_checkpoints_{.renamed = true, .files = {}, .bytes = 0};  // guarded by mu_
  std::string state_file_;  // guarded by mu_; the strategy state's file the committed row names, if any
  // The model whose file PrepareCheckpoint wrote, for the CommitRound that follows (which
  // forgets it either way). Identified by version and memory: the caller commits that object.
  struct PreparedCheckpoint {
    uint64_t version = 0;
    const float* values = nullptr;
    size_t bytes = 0;
  };
  std::optional<PreparedCheckpoint> prepared_;                     // guarded by mu_
  UpdateFileMapping mapping_ = UpdateFileMapping::kWhereInMemory;  // set before use
  bool mapping_decided_ = false;                                   // guarded by mu_
  std::shared_ptr<MappedUpdateFiles> mapped_;                      // guarded by mu_; null: off
  // The group commit's queue: rows waiting for the next commit, and whether one is running.
  std::mutex row_queue_mu_;
  std::condition_variable row_queue_cv_;
  std::vector<PendingUpdateRow*> row_queue_;     // guarded by row_queue_mu_
  bool committing_rows_ = false;                 // guarded by row_queue_mu_
  std::function<void(size_t)> row_commit_hook_;  // set before use; tests only
  // Applies the retention after the commit of `newest`. Requires mu_.
  void PruneCheckpointsLocked(uint64_t newest);
};

}  // namespace plexus
