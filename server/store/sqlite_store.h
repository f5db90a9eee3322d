// SqliteStore: the server's Store in one SQLite file (WAL mode, synchronous=FULL) and, next to it,
// a folder `<path>.checkpoints/` with one safetensors file per model version. Every state change
// is one transaction. A checkpoint's file is written atomically and synced before the row that
// names it (with its SHA-256, verified on read) commits, so a checkpoint the database knows is on
// disk whole. Models live outside the database because SQLite would copy a model-sized blob
// several times (into a record, its pages, the WAL, then the database file); a file is written
// once, straight from the model. An in-memory database (":memory:") keeps checkpoints inline, as
// databases written before the folder existed do; both are read. Thread-safe (one connection
// behind a mutex).
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "server/store/store.h"

struct sqlite3;

namespace plexus {

class SqliteStore final : public Store {
 public:
  // Opens or creates the database at `path`. Unavailable when the file cannot be opened;
  // DataLoss when it is not a Plexus database.
  static Result<std::unique_ptr<SqliteStore>> Open(const std::string& path);
  ~SqliteStore() override;

  Status PutMeta(const std::string& key, const std::string& value) override;
  Result<std::string> GetMeta(const std::string& key) override;
  Status PutClient(const ClientRecord& client) override;
  Result<std::vector<ClientRecord>> ListClients() override;
  Status PutCheckpoint(const ModelState& model) override;
  Status CommitRound(const RoundRecord& round, const ModelState& model, std::string_view aggregator_state) override;
  Result<std::string> AggregatorState() override;
  Status PutOpenRound(const OpenRoundRecord& round) override;
  Result<std::optional<OpenRoundRecord>> GetOpenRound() override;
  Status PutAcceptedUpdate(uint64_t round, int64_t attempt, const Update& update) override;
  Result<std::vector<Update>> ListAcceptedUpdates(uint64_t round, int64_t attempt) override;
  Status SetRoundEvaluation(uint64_t round, double test_accuracy, double test_loss) override;
  Result<std::vector<RoundRecord>> ListRounds() override;
  Result<std::optional<ModelState>> LatestCheckpoint() override;
  Result<ModelState> Checkpoint(uint64_t version) override;
  Result<std::vector<uint64_t>> CheckpointVersions() override;

 private:
  SqliteStore(sqlite3* db, std::string checkpoint_dir) : checkpoint_dir_(std::move(checkpoint_dir)), db_(db) {}
  Status Exec(const char* sql);
  // known_sha256: the model's ContentSha256 when the caller has it (a round's record carries it;
  // hashing a large model twice costs as much as receiving an update), else empty.
  Status PutCheckpointLocked(const ModelState& model, std::string_view known_sha256 = {});
  Result<ModelState> CheckpointLocked(uint64_t version);
  Status EnsureCheckpointDirLocked();

  const std::string checkpoint_dir_;  // empty: checkpoints inline in the database
  std::mutex mu_;
  sqlite3* db_;                       // guarded by mu_
  bool checkpoint_dir_ready_ = false;  // guarded by mu_
};

}  // namespace plexus
