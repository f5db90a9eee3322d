#include "server/coordinator/engine.h"

namespace plexus {

Status PendingCommit::Run(Store* store) {
  record.model_sha256 = model->ContentSha256();
  return store->CommitRound(record, *model, aggregator_state);
}

Status Engine::FinishCommit(PendingCommit commit, Status) {
  return InternalError("version " + std::to_string(commit.record.model_version) +
                       " handed back to an engine that queues no commits");
}

Result<RestoredState> RestoreEngineState(Store* store, const ModelState& initial) {
  RestoredState r;
  PLEXUS_ASSIGN_OR_RETURN(std::optional<ModelState> latest, store->LatestCheckpoint());
  if (latest) {
    Status same = latest->CheckSameLayout(initial);
    if (!same.ok()) {
      return FailedPreconditionError("the database holds a model of another architecture: " + same.message());
    }
    r.model = std::move(*latest);
  } else {
    r.model = initial;
    r.model.set_version(0);
    PLEXUS_RETURN_IF_ERROR(store->PutCheckpoint(r.model));
  }
  PLEXUS_ASSIGN_OR_RETURN(std::vector<ClientRecord> clients, store->ListClients());
  for (const ClientRecord& c : clients) r.client_ids.push_back(c.id);
  PLEXUS_ASSIGN_OR_RETURN(r.history, store->ListRounds());
  PLEXUS_ASSIGN_OR_RETURN(r.aggregator_state, store->AggregatorState());
  return r;
}

Status EvaluatePublished(ModelEvaluator* evaluator, Store* store, const ModelState& model, RoundRecord* record) {
  if (!evaluator) return Status::Ok();
  Result<Evaluation> eval = evaluator->Evaluate(model);
  if (!eval.ok()) return Status::Ok();
  record->test_accuracy = eval->accuracy;
  record->test_loss = eval->loss;
  return store->SetRoundEvaluation(record->round, eval->accuracy, eval->loss)
      .WithContext("record evaluation of version " + std::to_string(record->model_version));
}

std::optional<double> LastAccuracy(const std::vector<RoundRecord>& history) {
  for (auto it = history.rbegin(); it != history.rend(); ++it) {
    if (it->test_accuracy) return it->test_accuracy;
  }
  return std::nullopt;
}

}  // namespace plexus
