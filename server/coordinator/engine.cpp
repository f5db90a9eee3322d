#include "server/coordinator/engine.h"

#include <cmath>
#include <optional>
#include <thread>

namespace plexus {

Status PendingCommit::Run(Store* store) {
  // One thread: the committer runs beside uploads that keep every core busy, and writing the
  // file on a second thread measured no faster there (40 MB async ingest on tmpfs, old and new
  // alternately: the logged rate lower in seven pairs of eight).
  const std::string_view state = aggregator_state ? std::string_view(*aggregator_state) : std::string_view();
  return CommitWithDigests(store, &record, *model, state, &model_crc32c, /*write_while_hashing=*/false);
}

Status CommitWithDigests(Store* store, RoundRecord* record, const ModelState& model, std::string_view aggregator_state,
                         uint32_t* crc32c, bool write_while_hashing) {
  Status prepared = Status::Ok();
  std::optional<std::thread> writer;
  if (write_while_hashing && model.num_bytes() >= kPrepareWhileHashingBytes) {
    writer.emplace([&] { prepared = store->PrepareCheckpoint(model); });
  }
  ModelState::ContentDigests digests = model.Digests();
  if (writer) writer->join();
  PLEXUS_RETURN_IF_ERROR(prepared.WithContext("write the checkpoint of version " + std::to_string(model.version())));
  record->model_sha256 = std::move(digests.sha256);
  *crc32c = digests.crc32c;
  return store->CommitRound(*record, model, aggregator_state);
}

Status Engine::Submit(Update update) {
  PLEXUS_ASSIGN_OR_RETURN(AdmittedUpdate admitted, Admit(std::move(update)));
  Status persisted = Persist(admitted);
  return Complete(std::move(admitted), std::move(persisted));
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

Status CheckReportedNumbers(const Update& update) {
  // 2^40 examples or steps is far beyond any device; the bound keeps sums over a million updates
  // well inside int64 and exact in double.
  constexpr int64_t kMaxCount = int64_t{1} << 40;
  const std::string from = " from client '" + update.client_id + "' (task '" + update.task_id + "')";
  if (update.num_examples < 0 || update.num_examples > kMaxCount) {
    return InvalidArgumentError("num_examples " + std::to_string(update.num_examples) + from + " is outside [0, 2^40]");
  }
  if (update.local_steps < 0 || update.local_steps > kMaxCount) {
    return InvalidArgumentError("local_steps " + std::to_string(update.local_steps) + from + " is outside [0, 2^40]");
  }
  for (const auto& [name, value] : update.metrics) {
    // Beyond 1e300 a sum over many updates could still overflow to infinity.
    if (!std::isfinite(value) || std::fabs(value) > 1e300) {
      return InvalidArgumentError("metric '" + name + "'" + from + " is " + std::to_string(value) +
                                  ": reported numbers must be finite and within 1e300 (did local training diverge?)");
    }
  }
  return Status::Ok();
}

Status EvaluateUnevaluated(ModelEvaluator* evaluator, Store* store, std::vector<RoundRecord>* history) {
  if (!evaluator) return Status::Ok();
  size_t first = history->size();
  while (first > 0 && !(*history)[first - 1].test_accuracy) --first;
  for (size_t i = first; i < history->size(); ++i) {
    RoundRecord& record = (*history)[i];
    Result<ModelState> model = store->Checkpoint(record.model_version);
    if (!model.ok()) continue;
    PLEXUS_RETURN_IF_ERROR(EvaluatePublished(evaluator, store, *model, &record));
  }
  return Status::Ok();
}

std::optional<double> LastAccuracy(const std::vector<RoundRecord>& history) {
  for (auto it = history.rbegin(); it != history.rend(); ++it) {
    if (it->test_accuracy) return it->test_accuracy;
  }
  return std::nullopt;
}

}  // namespace plexus
