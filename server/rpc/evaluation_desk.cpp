#include "server/rpc/evaluation_desk.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace plexus {
namespace {

// --federated-eval-split is at most 0.9: a client's held-out share is at most 9 times what it trains on.
constexpr int64_t kMaxEvalPerTrainExample = 9;

}  // namespace

EvaluationDesk::EvaluationDesk(FederatedEvaluationOptions options, Engine* engine, Store* store, const Clock* clock)
    : engine_(engine), store_(store), clock_(clock), federated_(options) {
  // Clients that joined before a restart keep what they declared.
  if (Result<std::vector<ClientRecord>> known = store_->ListClients(); known.ok()) {
    for (const ClientRecord& c : *known) declared_[c.id] = std::max<int64_t>(0, c.num_examples);
  }
  // A server stopped while the clients evaluated its last version: that version has no stored
  // result, and its campaign opens again (the versions before it are not evaluated again).
  const std::vector<RoundRecord>& history = engine_->history();
  if (federated_.Resume(history, engine_->finished(), KnownClients(), clock_->NowMs())) {
    spdlog::info("version {}: resuming its federated evaluation", history.back().model_version);
  }
}

void EvaluationDesk::Declare(const std::string& client_id, int64_t examples) {
  declared_[client_id] = std::max<int64_t>(0, examples);
}

Result<PollAnswer> EvaluationDesk::Poll(const std::string& client_id) {
  if (!federated_.enabled()) return engine_->Poll(client_id);
  Update();
  if (std::optional<Task> t = federated_.TaskFor(client_id, clock_->NowMs())) {
    // The published version's checksum (the client's check of its download, as in training
    // tasks); an older version's is not kept, and its task names the SHA-256 alone.
    if (t->model_version == engine_->model().version()) t->model_crc32c = engine_->model_crc32c();
    PollAnswer a;
    a.kind = PollAnswer::Kind::kTask;
    a.task = std::move(*t);
    return a;
  }
  Result<PollAnswer> a = engine_->Poll(client_id);
  if (a.ok() && a->kind == PollAnswer::Kind::kFinished && federated_.Owes(client_id)) {
    a->kind = PollAnswer::Kind::kWait;
    a->retry_after_ms = 500;
  }
  return a;
}

Status EvaluationDesk::Report(const std::string& client_id, const std::string& task_id, const Evaluation& e) {
  // One client must not swamp a version's result (one that joined with 10 examples reported
  // 2^40): it holds out at most nine times the training examples it declared (plus rounding).
  const auto declared = declared_.find(client_id);
  const int64_t declared_examples = declared == declared_.end() ? 0 : declared->second;
  const int64_t most = declared == declared_.end() ? 0 : kMaxEvalPerTrainExample * declared_examples + 9;
  if (e.examples > most) {
    return InvalidArgumentError(
        fmt::format("evaluation report of task {} counts {} examples; client {} declared {} training examples at "
                    "join, so it can hold out at most {}",
                    task_id, e.examples, client_id, declared_examples, most));
  }
  PLEXUS_RETURN_IF_ERROR(federated_.Report(client_id, task_id, e));
  Collect();
  return Status::Ok();
}

void EvaluationDesk::Update() {
  federated_.Follow(
      engine_->history(), engine_->finished(), [this] { return KnownClients(); }, clock_->NowMs());
  Collect();
}

void EvaluationDesk::FillStatus(EngineStatus* status) const {
  if (results_.empty()) return;
  status->federated_version = results_.rbegin()->first;
  status->last_federated_accuracy = results_.rbegin()->second.federated_accuracy;
}

std::vector<std::string> EvaluationDesk::KnownClients() const {
  std::vector<std::string> known;
  for (const auto& [id, examples] : declared_) known.push_back(id);
  return known;
}

void EvaluationDesk::Collect() {
  if (!federated_.enabled()) return;
  for (RoundRecord& r : federated_.Collect(clock_->NowMs())) {
    spdlog::info("version {}: federated accuracy {:.4f}, loss {:.4f} ({} examples from {} clients)", r.model_version,
                 *r.federated_accuracy, *r.federated_loss, r.federated_examples, r.federated_clients);
    if (Status s = store_->SetFederatedEvaluation(r); !s.ok()) {
      spdlog::error("federated evaluation of version {} not stored: {}", r.model_version, s.ToString());
    }
    results_[r.model_version] = std::move(r);
  }
}

}  // namespace plexus
