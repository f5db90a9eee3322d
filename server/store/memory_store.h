// MemoryStore: a Store kept in process memory, for tests and the simulator. Same contract as
// SqliteStore (a shared conformance suite runs against both); nothing survives the process.
// Thread-safe.
#pragma once

#include <map>
#include <mutex>

#include "server/store/store.h"

namespace plexus {

class MemoryStore final : public Store {
 public:
  // What exists only for recovery after a restart: client records and the accepted updates of
  // the open round. The simulator, whose server never restarts, keeps neither
  // (keep_recovery_data = false): a million clients would hold a record each and a round of a
  // thousand clients a thousand updates. Lists of them are then empty.
  explicit MemoryStore(bool keep_recovery_data = true) : keep_recovery_data_(keep_recovery_data) {}

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
  Status LogUpdate(uint64_t seq, const Update& update) override;
  Result<std::vector<LoggedUpdate>> ListLoggedUpdates() override;
  Status SetRoundEvaluation(uint64_t round, double test_accuracy, double test_loss) override;
  Status SetFederatedEvaluation(const RoundRecord& evaluation) override;
  Result<std::vector<RoundRecord>> ListRounds() override;
  Result<std::optional<ModelState>> LatestCheckpoint() override;
  Result<ModelState> Checkpoint(uint64_t version) override;
  Result<std::vector<uint64_t>> CheckpointVersions() override;

 private:
  Status PutCheckpointLocked(const ModelState& model);

  const bool keep_recovery_data_;
  std::mutex mu_;
  std::map<std::string, std::string> meta_;      // guarded by mu_
  std::map<std::string, ClientRecord> clients_;  // guarded by mu_
  std::map<uint64_t, RoundRecord> rounds_;       // guarded by mu_
  std::map<uint64_t, ModelState> checkpoints_;   // guarded by mu_
  std::string aggregator_state_;                 // guarded by mu_
  std::optional<OpenRoundRecord> open_round_;    // guarded by mu_
  std::map<std::string, Update> accepted_;       // guarded by mu_; by client id, of open_round_
  std::map<uint64_t, Update> logged_;            // guarded by mu_; by sequence number
};

}  // namespace plexus
