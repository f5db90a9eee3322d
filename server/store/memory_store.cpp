#include "server/store/memory_store.h"

namespace plexus {

namespace {
// What the stores keep of an update: its values and counts, and only its train_loss metric.
Update KeptPartOf(const Update& update) {
  Update kept = update;
  kept.metrics.clear();
  if (auto it = update.metrics.find("train_loss"); it != update.metrics.end()) kept.metrics["train_loss"] = it->second;
  return kept;
}
}  // namespace

Status MemoryStore::PutMeta(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(mu_);
  meta_[key] = value;
  return Status::Ok();
}

Result<std::string> MemoryStore::GetMeta(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = meta_.find(key);
  if (it == meta_.end()) return NotFoundError("no metadata '" + key + "'");
  return it->second;
}

Status MemoryStore::PutClient(const ClientRecord& client) {
  std::lock_guard<std::mutex> lock(mu_);
  if (keep_recovery_data_) clients_[client.id] = client;
  return Status::Ok();
}

Result<std::vector<ClientRecord>> MemoryStore::ListClients() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ClientRecord> out;
  for (const auto& [id, c] : clients_) out.push_back(c);
  return out;
}

Status MemoryStore::PutCheckpointLocked(const ModelState& model) {
  auto it = checkpoints_.find(model.version());
  if (it != checkpoints_.end()) {
    if (it->second == model) return Status::Ok();
    return AlreadyExistsError("checkpoint of version " + std::to_string(model.version()) +
                              " already exists with different content");
  }
  checkpoints_.emplace(model.version(), model);
  return Status::Ok();
}

Status MemoryStore::PutCheckpoint(const ModelState& model) {
  std::lock_guard<std::mutex> lock(mu_);
  return PutCheckpointLocked(model);
}

Status MemoryStore::CommitRound(const RoundRecord& round, const ModelState& model, std::string_view aggregator_state) {
  if (model.version() != round.model_version) {
    return InvalidArgumentError("round " + std::to_string(round.round) + " publishes version " +
                                std::to_string(round.model_version) + " but the checkpoint has version " +
                                std::to_string(model.version()));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (rounds_.count(round.round))
    return AlreadyExistsError("round " + std::to_string(round.round) + " is already committed");
  PLEXUS_RETURN_IF_ERROR(PutCheckpointLocked(model));
  rounds_[round.round] = round;
  aggregator_state_ = aggregator_state;
  open_round_.reset();
  accepted_.clear();
  for (uint64_t seq : round.logged_done) logged_.erase(seq);
  return Status::Ok();
}

Result<std::string> MemoryStore::AggregatorState() {
  std::lock_guard<std::mutex> lock(mu_);
  return aggregator_state_;
}

Status MemoryStore::PutOpenRound(const OpenRoundRecord& round) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!open_round_ || open_round_->round != round.round || open_round_->attempt != round.attempt) accepted_.clear();
  open_round_ = round;
  return Status::Ok();
}

Result<std::optional<OpenRoundRecord>> MemoryStore::GetOpenRound() {
  std::lock_guard<std::mutex> lock(mu_);
  return open_round_;
}

Status MemoryStore::PutAcceptedUpdate(uint64_t round, int64_t attempt, const Update& update) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!open_round_ || open_round_->round != round || open_round_->attempt != attempt) {
    return FailedPreconditionError("round " + std::to_string(round) + " attempt " + std::to_string(attempt) +
                                   " is not the open round");
  }
  if (!keep_recovery_data_) return Status::Ok();
  accepted_[update.client_id] = KeptPartOf(update);
  return Status::Ok();
}

Result<std::vector<Update>> MemoryStore::ListAcceptedUpdates(uint64_t round, int64_t attempt) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Update> out;
  if (!open_round_ || open_round_->round != round || open_round_->attempt != attempt) return out;
  for (const auto& [id, u] : accepted_) out.push_back(u);
  return out;
}

Status MemoryStore::LogUpdate(uint64_t seq, const Update& update) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!keep_recovery_data_) return Status::Ok();
  if (logged_.count(seq)) return AlreadyExistsError("update log entry " + std::to_string(seq) + " is taken");
  logged_.emplace(seq, KeptPartOf(update));
  return Status::Ok();
}

Result<std::vector<LoggedUpdate>> MemoryStore::ListLoggedUpdates() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<LoggedUpdate> out;
  for (const auto& [seq, u] : logged_) out.push_back({seq, u});
  return out;
}

Status MemoryStore::SetRoundEvaluation(uint64_t round, double test_accuracy, double test_loss) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = rounds_.find(round);
  if (it == rounds_.end()) return NotFoundError("no round " + std::to_string(round));
  it->second.test_accuracy = test_accuracy;
  it->second.test_loss = test_loss;
  return Status::Ok();
}

Status MemoryStore::SetFederatedEvaluation(const RoundRecord& e) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [r, rec] : rounds_) {
    if (rec.model_version != e.model_version) continue;
    rec.federated_accuracy = e.federated_accuracy;
    rec.federated_loss = e.federated_loss;
    rec.federated_examples = e.federated_examples;
    rec.federated_clients = e.federated_clients;
    return Status::Ok();
  }
  return NotFoundError("no round published version " + std::to_string(e.model_version));
}

Result<std::vector<RoundRecord>> MemoryStore::ListRounds() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<RoundRecord> out;
  for (const auto& [r, rec] : rounds_) out.push_back(rec);
  return out;
}

Result<std::optional<ModelState>> MemoryStore::LatestCheckpoint() {
  std::lock_guard<std::mutex> lock(mu_);
  if (checkpoints_.empty()) return std::optional<ModelState>();
  return std::optional<ModelState>(checkpoints_.rbegin()->second);
}

Result<ModelState> MemoryStore::Checkpoint(uint64_t version) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = checkpoints_.find(version);
  if (it == checkpoints_.end()) return NotFoundError("no checkpoint of version " + std::to_string(version));
  return it->second;
}

Result<std::vector<uint64_t>> MemoryStore::CheckpointVersions() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint64_t> out;
  for (const auto& [v, m] : checkpoints_) out.push_back(v);
  return out;
}

}  // namespace plexus
