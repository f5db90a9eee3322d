// StoreWrapper: a Store that forwards every call to a target Store. Fault injectors and
// instrumented stores override just the calls they change (e.g. fail CommitRound).
// Borrows the target, which must outlive the wrapper. Thread-safe if the target is.
#pragma once

#include "server/store/store.h"

namespace plexus {

class StoreWrapper : public Store {
 public:
  explicit StoreWrapper(Store* target) : target_(target) {}

  Status PutMeta(const std::string& k, const std::string& v) override { return target_->PutMeta(k, v); }
  Result<std::string> GetMeta(const std::string& k) override { return target_->GetMeta(k); }
  Status PutClient(const ClientRecord& c) override { return target_->PutClient(c); }
  Result<std::vector<ClientRecord>> ListClients() override { return target_->ListClients(); }
  Status PutCheckpoint(const ModelState& m) override { return target_->PutCheckpoint(m); }
  Status CommitRound(const RoundRecord& r, const ModelState& m, std::string_view state) override {
    return target_->CommitRound(r, m, state);
  }
  Status PrepareCheckpoint(const ModelState& m) override { return target_->PrepareCheckpoint(m); }
  Result<std::string> AggregatorState() override { return target_->AggregatorState(); }
  Status PutOpenRound(const OpenRoundRecord& r) override { return target_->PutOpenRound(r); }
  Result<std::optional<OpenRoundRecord>> GetOpenRound() override { return target_->GetOpenRound(); }
  Status PutAcceptedUpdate(uint64_t r, int64_t a, const Update& u) override {
    return target_->PutAcceptedUpdate(r, a, u);
  }
  Status LogUpdate(uint64_t seq, const Update& u) override { return target_->LogUpdate(seq, u); }
  Result<std::vector<LoggedUpdate>> ListLoggedUpdates() override { return target_->ListLoggedUpdates(); }
  Result<std::vector<Update>> ListAcceptedUpdates(uint64_t r, int64_t a) override {
    return target_->ListAcceptedUpdates(r, a);
  }
  Status SetRoundEvaluation(uint64_t r, double a, double l) override { return target_->SetRoundEvaluation(r, a, l); }
  Status SetFederatedEvaluation(const RoundRecord& e) override { return target_->SetFederatedEvaluation(e); }
  Result<std::vector<RoundRecord>> ListRounds() override { return target_->ListRounds(); }
  Result<std::optional<ModelState>> LatestCheckpoint() override { return target_->LatestCheckpoint(); }
  Result<ModelState> Checkpoint(uint64_t v) override { return target_->Checkpoint(v); }
  Result<std::vector<uint64_t>> CheckpointVersions() override { return target_->CheckpointVersions(); }
  std::shared_ptr<LargeBlockSource> UpdateMemory() override { return target_->UpdateMemory(); }

 private:
  Store* const target_;
};

}  // namespace plexus
