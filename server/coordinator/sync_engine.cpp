#include "server/coordinator/sync_engine.h"

#include "server/coordinator/mode.h"

#include <algorithm>
#include <cmath>

#include "aggregators/partial_sum_delta.h"
#include "aggregators/registry.h"
#include "aggregators/simd_kernels.h"
#include "aggregators/update_bundle.h"
#include "core/rng.h"

namespace plexus {
namespace {

// The client updates in `u`: an edge's partial sum carries its clients' count, a bundle of
// forwarded updates their number, any other update one.
int64_t UpdatesIn(const Update& u) {
  if (const PartialSumDelta* partial = PartialSumOf(u)) return partial->sum().count();
  return static_cast<int64_t>(BundledOrSelf(u).size());
}

}  // namespace

Status SyncOptions::Validate() const {
  PLEXUS_RETURN_IF_ERROR(ValidateShared());
  PLEXUS_RETURN_IF_ERROR(PositiveOption(clients_per_round, "clients-per-round"));
  PLEXUS_RETURN_IF_ERROR(PositiveOption(min_clients, "min-clients"));
  if (min_clients > clients_per_round) {
    return InvalidArgumentError("min-clients (" + std::to_string(min_clients) + ") cannot exceed clients-per-round (" +
                                std::to_string(clients_per_round) + ")");
  }
  PLEXUS_RETURN_IF_ERROR(PositiveOption(round_deadline_ms, "round deadline"));
  if (selection_wait_ms < 0) return InvalidArgumentError("selection wait must not be negative");
  if (!(overselect >= 1.0 && overselect <= 10.0)) return InvalidArgumentError("overselect must lie in [1, 10]");
  if (min_updates < 0) return InvalidArgumentError("min-updates must not be negative");
  PLEXUS_RETURN_IF_ERROR(BackupWorkers::Parse(backup_workers).status());
  // A round may close with min-clients updates: the strategy must be able to merge that many.
  Result<std::unique_ptr<Aggregator>> made = MakeAggregator(strategy, nullptr);
  if (!made.ok()) return made.status().WithContext("--strategy");
  const std::unique_ptr<Aggregator>& merge = *made;
  if (const size_t fewest = merge->min_updates(); static_cast<size_t>(min_clients) < fewest) {
    return InvalidArgumentError("strategy " + merge->Describe() + " needs at least " + std::to_string(fewest) +
                                " updates per round, but min-clients is " + std::to_string(min_clients) +
                                ": raise --min-clients (and --clients-per-round) to " + std::to_string(fewest) +
                                " or more, or lower the strategy's f");
  }
  if (edge_robust && !edge) {
    return InvalidArgumentError("--edge-robust is for edge aggregators (--upstream)");
  }
  if (edge_forward_raw && (!edge || edge_robust)) {
    return InvalidArgumentError("--upstream-forward raw is for edge aggregators (--upstream), without --edge-robust");
  }
  if (edge) {
    if (secagg) return InvalidArgumentError("an edge aggregator (--upstream) cannot run --secagg");
    if (merge->partial_sum() == nullptr && !edge_robust) {
      return InvalidArgumentError("an edge aggregator (--upstream) sends its parent exact partial sums: --strategy " +
                                  merge->Describe() +
                                  " keeps none (use fedavg_exact, or norm_bound:max=R,exact=true; robust rules do not "
                                  "compose through a tree: --edge-robust runs the rule "
                                  "over each edge's own clients instead, a weaker guarantee)");
    }
    if (merge->partial_sum() != nullptr && !merge->finalizes_to_the_mean()) {
      return InvalidArgumentError(
          "an edge aggregator (--upstream) sends its parent the exact sum of its clients' "
          "deltas: --strategy " +
          merge->Describe() +
          " steps a server optimizer after it, which belongs at the root (run it there; "
          "here fedavg_exact, or norm_bound:max=R,exact=true to clip at the edge)");
    }
    if (merge->partial_sum() != nullptr && edge_robust) {
      return InvalidArgumentError("--edge-robust is for robust rules: " + merge->Describe() +
                                  " composes through the tree exactly as it is");
    }
  }
  if (secagg) {
    const char* why = nullptr;
    if (overselect != 1.0) why = "over-selection";
    if (backup_workers != "none") why = "backup workers";
    if (why) {
      return InvalidArgumentError(std::string("--secagg with ") + why +
                                  ": a secure group is the round's sample and closes with every member that stays");
    }
    PLEXUS_RETURN_IF_ERROR(CheckSecureStrategy(*secagg, strategy, *merge));
    PLEXUS_RETURN_IF_ERROR(secagg->GraphFor(static_cast<int>(std::min<int64_t>(min_clients, 100000))).status());
    PLEXUS_RETURN_IF_ERROR(secagg->GraphFor(static_cast<int>(std::min<int64_t>(clients_per_round, 100000))).status());
  }
  return Status::Ok();
}

SyncEngine::SyncEngine(const SyncOptions& options, Store* store, const Clock* clock, ModelEvaluator* evaluator)
    : options_(options),
      store_(store),
      clock_(clock),
      evaluator_(evaluator),
      clients_(store, clock, options.client_timeout_ms) {}

Result<std::unique_ptr<SyncEngine>> SyncEngine::Open(const SyncOptions& options, const ModelState& initial_model,
                                                     Store* store, const Clock* clock, ModelEvaluator* evaluator,
                                                     ThreadPool* pool) {
  PLEXUS_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<SyncEngine> e(new SyncEngine(options, store, clock, evaluator));
  PLEXUS_ASSIGN_OR_RETURN(e->aggregator_, MakeAggregator(options.strategy, pool));
  e->strategy_description_ = e->aggregator_->Describe();
  if (options.secagg) e->strategy_description_ += " over secure aggregation (" + options.secagg->Describe() + ")";
  if (options.edge_robust) e->strategy_description_ += " over each edge's own clients (edge-robust)";
  if (options.edge_forward_raw) e->strategy_description_ = "forwarding every update raw to the parent";
  e->pool_ = pool;

  PLEXUS_ASSIGN_OR_RETURN(BackupWorkers backups, BackupWorkers::Parse(options.backup_workers));
  e->backups_ = std::move(backups);

  RestoredState restored;
  PLEXUS_ASSIGN_OR_RETURN(PublishedVersions published,
                          PublishedVersions::Open(store, evaluator, initial_model, &restored));
  e->published_.emplace(std::move(published));
  e->acknowledged_.AddMerged(e->published_->history());
  e->clients_.Restore(restored.client_ids);
  PLEXUS_RETURN_IF_ERROR(e->aggregator_->RestoreState(restored.aggregator_state)
                             .WithContext("restore the strategy's state (was --strategy changed?)"));
  e->head_state_ = std::move(restored.aggregator_state);
  e->idle_since_ms_ = clock->NowMs();
  PLEXUS_RETURN_IF_ERROR(e->RestoreOpenRound().WithContext("restore the open round"));
  return e;
}

Status SyncEngine::RestoreOpenRound() {
  PLEXUS_ASSIGN_OR_RETURN(std::optional<OpenRoundRecord> saved, store_->GetOpenRound());
  if (!saved || saved->round != published_->version() + 1 || finished()) return Status::Ok();
  if (options_.secagg) {
    // The group's keys and shares died with the previous process: the round starts again.
    attempts_ = saved->attempt + 1;
    return Status::Ok();
  }
  OpenRound r;
  r.round = saved->round;
  r.attempt = saved->attempt;
  r.deadline_ms = clock_->NowMs() + options_.round_deadline_ms;  // a fresh deadline after the restart
  for (const auto& [client, task] : saved->tasks) {
    r.task_of_client[client] = task;
    r.client_of_task[task] = client;
  }
  r.wait_for = WaitFor(r.task_of_client);
  PLEXUS_RETURN_IF_ERROR(aggregator_->Begin(published_->model()));
  PLEXUS_ASSIGN_OR_RETURN(std::vector<Update> accepted, store_->ListAcceptedUpdates(r.round, r.attempt));
  for (Update& kept : accepted) {
    if (!r.task_of_client.count(kept.client_id)) continue;
    auto shared = std::make_shared<Update>(std::move(kept));  // given to the strategy as Admit gives it
    const Update& u = *shared;
    PLEXUS_RETURN_IF_ERROR(FoldClientUpdates(shared).WithContext("re-fold the update of " + u.client_id));
    r.submitted.insert(u.client_id);
    for (MergedUpdate& m : MergedEntriesOf(u, options_.edge)) r.merged.push_back(std::move(m));
    r.updates += UpdatesIn(u);
    acknowledged_.Add(u.client_id, u.task_id);
    for (const Update& inner : BundledOrSelf(u)) r.tally.Add(inner);
  }
  attempts_ = r.attempt;
  open_ = std::move(r);
  return Status::Ok();
}

Result<std::string> SyncEngine::Join(const ClientRecord& client) {
  PLEXUS_RETURN_IF_ERROR(sticky_error_);
  return clients_.Join(client);
}

void SyncEngine::MaybeStartRound() {
  if (open_ || finished()) return;
  if (options_.edge && !parent_round_) return;  // rounds open on the parent's versions only
  const int64_t now = clock_->NowMs();
  // Pointers to the registry's ids: a million connected clients cost 8 MB here, not 32.
  std::vector<const std::string*> available = clients_.ConnectedIds();
  // Only clients whose update the strategy would take (DP-FTRL caps contributions per tree).
  std::erase_if(available,
                [&](const std::string* id) { return !aggregator_->MayContribute(*id, published_->version()); });
  const auto n = static_cast<int64_t>(available.size());
  const bool enough = n >= options_.clients_per_round ||
                      (n >= options_.min_clients && now - idle_since_ms_ >= options_.selection_wait_ms);
  if (!enough) return;

  OpenRound r;
  r.round = options_.edge ? *parent_round_ : published_->version() + 1;
  r.attempt = attempts_;
  r.deadline_ms = now + options_.round_deadline_ms;
  Rng rng = Rng::Derive(options_.seed, r.round * 1000003ULL + static_cast<uint64_t>(r.attempt));
  rng.Shuffle(std::span<const std::string*>(available));
  const auto wanted =
      static_cast<int64_t>(std::ceil(static_cast<double>(options_.clients_per_round) * options_.overselect - 1e-9));
  available.resize(static_cast<size_t>(std::min(n, wanted)));
  std::vector<std::string> chosen;
  chosen.reserve(available.size());
  for (const std::string* id : available) chosen.push_back(*id);
  available = {};
  std::sort(chosen.begin(), chosen.end());
  for (const std::string& id : chosen) r.AddTask(id);
  r.wait_for = WaitFor(r.task_of_client);
  if (options_.secagg) {
    const uint64_t binding = r.round * 1000003ULL + static_cast<uint64_t>(r.attempt);
    Result<std::unique_ptr<SecureRound>> secure =
        SecureRound::Start(*options_.secagg, binding, Rng::Derive(options_.seed ^ 0x5ec0a99ULL, binding).NextU64(),
                           chosen, published_->model(), now, options_.round_deadline_ms, pool_);
    if (!secure.ok()) {
      sticky_error_ = secure.status().WithContext("start the secure group of round " + std::to_string(r.round));
      return;
    }
    r.secure = std::move(secure).value();
  }
  // Begin cannot fail for a valid model; a failure here would be a programming error.
  Status begun = aggregator_->Begin(published_->model());
  if (begun.ok()) begun = store_->PutOpenRound(r.Record());
  if (!begun.ok()) {
    sticky_error_ = begun.WithContext("start round " + std::to_string(r.round));
    return;
  }
  open_ = std::move(r);
  ++poll_epoch_;
}

size_t SyncEngine::WaitFor(const std::map<std::string, std::string>& selected) const {
  std::vector<std::string> ids;
  for (const auto& [id, task] : selected) ids.push_back(id);
  const size_t k = backups_->UpdatesToWaitFor(ids, static_cast<size_t>(options_.min_clients));
  return std::min(k, static_cast<size_t>(options_.clients_per_round));  // over-selection closes at K
}

Task SyncEngine::TaskFor(const std::string& client_id) const {
  Task t;
  t.task_id = open_->task_of_client.at(client_id);
  t.round = open_->round;
  t.model_version = published_->version();
  t.model_sha256 = published_->sha256();
  t.model_crc32c = published_->crc32c();
  t.hyperparams = options_.task;
  if (options_.edge && parent_local_steps_ > 0) t.hyperparams.local_steps = parent_local_steps_;
  t.deadline_ms = open_->deadline_ms;
  return t;
}

Result<PollAnswer> SyncEngine::Poll(const std::string& client_id) {
  PLEXUS_RETURN_IF_ERROR(sticky_error_);
  PLEXUS_RETURN_IF_ERROR(clients_.Admit(client_id));
  PollAnswer answer;
  if (finished()) {
    answer.kind = PollAnswer::Kind::kFinished;
    return answer;
  }
  MaybeStartRound();
  PLEXUS_RETURN_IF_ERROR(sticky_error_);
  // A secure group's task goes out until its member advertised its keys: later, it could not join.
  if (open_ && open_->task_of_client.count(client_id) && !open_->submitted.count(client_id) &&
      (!open_->secure || open_->secure->Joinable(client_id))) {
    open_->handed_out_ms.emplace(client_id, clock_->NowMs());
    answer.kind = PollAnswer::Kind::kTask;
    answer.task = TaskFor(client_id);
    return answer;
  }
  answer.kind = PollAnswer::Kind::kWait;
  answer.retry_after_ms = options_.poll_retry_ms;
  return answer;
}

Status SyncEngine::CheckOpenTask(const std::string& client_id, const std::string& task_id) const {
  PLEXUS_RETURN_IF_ERROR(clients_.CheckKnown(client_id));
  if (acknowledged_.Contains(client_id, task_id)) return Status::Ok();  // sent again: Submit acknowledges it
  if (finished()) {
    return FailedPreconditionError("the federation has finished; update for task '" + task_id + "' ignored");
  }
  auto owner = open_ ? open_->client_of_task.find(task_id) : decltype(open_->client_of_task.end())();
  if (!open_ || owner == open_->client_of_task.end()) {
    return NotFoundError("unknown task id '" + task_id +
                         "': not a task of the open round (it may belong to a closed or abandoned round)");
  }
  if (owner->second != client_id) {
    return PermissionDeniedError("task '" + task_id + "' belongs to another client, not '" + client_id + "'");
  }
  return Status::Ok();
}

Result<AdmittedUpdate> SyncEngine::Admit(Update update) {
  PLEXUS_RETURN_IF_ERROR(sticky_error_);
  if (Status admitted = clients_.Admit(update.client_id); !admitted.ok()) {
    ++updates_refused_;
    return admitted;
  }
  if (Status numbers = CheckReportedNumbers(update); !numbers.ok()) {
    ++updates_refused_;
    return numbers;
  }
  if (acknowledged_.Contains(update.client_id, update.task_id)) {  // its answer was lost
    return AdmittedUpdate{std::move(update), /*already_acknowledged=*/true};
  }
  if (options_.secagg) {
    ++updates_refused_;
    return FailedPreconditionError(
        "this server runs secure aggregation: updates go through its stages "
        "(SecureAggregation), never in the clear");
  }
  if (Status open = CheckOpenTask(update.client_id, update.task_id); !open.ok()) {
    ++updates_refused_;
    return open;
  }
  if (open_->submitted.count(update.client_id)) {  // idempotent retry
    return AdmittedUpdate{std::move(update), /*already_acknowledged=*/true};
  }
  if (open_->tainted) return UnavailableError("this round is being retried; ask for a task again");
  if (open_->persisting.count(update.client_id)) {
    return UnavailableError("the update of task '" + update.task_id + "' is being stored; ask again for its answer");
  }
  if (update.base_version != published_->version()) {
    ++updates_refused_;
    return FailedPreconditionError("update trained from version " + std::to_string(update.base_version) +
                                   " but the round is on version " + std::to_string(published_->version()));
  }
  size_t folded_count = 0;
  // Shared from here on: a plain update is given up to the strategy, which may hold it (the
  // averaging family folds four per pass over its sum, FedBuff's path), while the store writes it;
  // the checks and their errors are now either way.
  auto shared = std::make_shared<Update>(std::move(update));
  Status folded = FoldClientUpdates(shared, &folded_count);
  if (!folded.ok()) {
    ++updates_refused_;
    if (folded_count > 0) {  // part of a bundle is in the sum: this attempt cannot publish
      open_->tainted = true;
      if (open_->persisting.empty()) AbandonRound();
      return folded.WithContext("refused after " + std::to_string(folded_count) +
                                " of its updates were folded; the round is retried");
    }
    return folded;
  }
  // In the strategy already (folded or held): the round neither closes nor is abandoned until
  // Complete (RoundComplete, Tick).
  open_->persisting.insert(shared->client_id);
  AdmittedUpdate admitted;
  admitted.shared = std::move(shared);
  admitted.round = open_->round;
  admitted.attempt = open_->attempt;
  return admitted;
}

Status SyncEngine::Persist(const AdmittedUpdate& admitted) const {
  if (admitted.already_acknowledged) return Status::Ok();
  // Durable before it is acknowledged: a restarted server folds it in again.
  return store_->PutAcceptedUpdate(admitted.round, admitted.attempt, admitted.get());
}

Status SyncEngine::Complete(AdmittedUpdate admitted, Status persisted) {
  if (admitted.already_acknowledged) return Status::Ok();
  const Update& update = admitted.get();
  if (!open_ || open_->round != admitted.round || open_->attempt != admitted.attempt ||
      open_->persisting.erase(update.client_id) == 0) {
    // Cannot happen while rounds wait for their admitted updates; a bug if it does.
    sticky_error_ = InternalError("update of " + update.client_id + " completed outside the round that admitted it");
    return sticky_error_;
  }
  if (!persisted.ok()) {
    sticky_error_ = persisted.WithContext("store the update of " + update.client_id);
    return sticky_error_;
  }
  PLEXUS_RETURN_IF_ERROR(sticky_error_);
  ++updates_accepted_;
  open_->submitted.insert(update.client_id);
  // At an edge each update is hashed (under the lock: a pass over it) for the partial's list.
  for (MergedUpdate& m : MergedEntriesOf(update, options_.edge)) open_->merged.push_back(std::move(m));
  open_->updates += UpdatesIn(update);
  acknowledged_.Add(update.client_id, update.task_id);
  if (backups_->dynamic()) {
    if (auto it = open_->handed_out_ms.find(update.client_id); it != open_->handed_out_ms.end()) {
      backups_->ObserveDuration(update.client_id, clock_->NowMs() - it->second);
    }
    open_->update_sq_norms += update.coded ? update.coded->SquaredNorm()
                                           : simd::SquaredNorm(update.delta.data().data(), update.delta.num_params());
  }
  for (const Update& inner : BundledOrSelf(update)) open_->tally.Add(inner);
  if (open_->tainted) {
    if (open_->persisting.empty()) AbandonRound();
    return Status::Ok();
  }
  if (RoundComplete()) return CloseRound();
  return Status::Ok();
}

Status SyncEngine::FoldClientUpdates(const std::shared_ptr<Update>& shared, size_t* folded) {
  const Update& update = *shared;
  const auto* bundle = dynamic_cast<const UpdateBundle*>(update.coded.get());
  if (bundle == nullptr) {
    // Given up to the strategy, which may hold it to fold it later with others.
    if (!update.coded || aggregator_->folds_coded()) return aggregator_->FoldShared(shared, 1.0);
    Update plain = update;  // stored coded by a server whose strategy folded codes; this one's may not
    MaterializeCoded(plain, published_->model());
    return aggregator_->Fold(plain);
  }
  // Each forwarded update as if its client had sent it, under its path below the edge.
  for (Update& inner : UnbundledUpdates(update)) {
    if (inner.coded && !aggregator_->folds_coded()) MaterializeCoded(inner, published_->model());
    inner.base_version = update.base_version;
    PLEXUS_RETURN_IF_ERROR(aggregator_->Fold(inner).WithContext("forwarded update of " + inner.client_id));
    if (folded) ++*folded;
  }
  return Status::Ok();
}

Status SyncEngine::Refused(const std::string& client_id, const std::string& task_id) {
  PLEXUS_RETURN_IF_ERROR(sticky_error_);
  if (!open_ || open_->submitted.count(client_id) || open_->persisting.count(client_id) || open_->secure) {
    return Status::Ok();  // a group stays as sampled
  }
  auto owner = open_->client_of_task.find(task_id);
  if (owner == open_->client_of_task.end() || owner->second != client_id) return Status::Ok();
  if (!open_->refused.insert(client_id).second) return Status::Ok();
  // A free client in its place: connected, not in this attempt's sample, not refused in it.
  std::vector<std::string> free;
  for (const std::string& id : clients_.Connected()) {
    if (!open_->task_of_client.count(id) && !open_->refused.count(id) &&
        aggregator_->MayContribute(id, published_->version())) {
      free.push_back(id);
    }
  }
  if (!free.empty()) {
    Rng rng = Rng::Derive(
        options_.seed ^ 0x5eed5eedULL,
        open_->round * 1000003ULL + static_cast<uint64_t>(open_->attempt) * 1009ULL + open_->refused.size());
    open_->AddTask(free[rng.Below(free.size())]);
    // Stored like the round's first sample: a restarted server hands the replacement its task.
    if (Status s = store_->PutOpenRound(open_->Record()); !s.ok()) {
      sticky_error_ = s.WithContext("record the open round " + std::to_string(open_->round) + " after a refusal");
      return sticky_error_;
    }
    ++poll_epoch_;
  }
  if (RoundComplete()) return CloseRound();
  return Status::Ok();
}

Status SyncEngine::Leave(const std::string& client_id) {
  PLEXUS_RETURN_IF_ERROR(sticky_error_);
  clients_.Forget(client_id);  // first: the replacement Refused samples is someone else
  if (!open_ || open_->submitted.count(client_id)) return Status::Ok();
  auto it = open_->task_of_client.find(client_id);
  if (it == open_->task_of_client.end()) return Status::Ok();
  const std::string task = it->second;
  return Refused(client_id, task);
}

bool SyncEngine::RoundComplete() const {
  if (!open_->persisting.empty()) return false;  // folded, being stored: Complete checks again
  if (open_->submitted.size() >= open_->wait_for) return true;
  if (open_->refused.empty()) return false;
  // After refusals, what is in closes the round once every task not refused is in and it makes a
  // quorum (Tick would only wait for the deadline to do the same).
  for (const auto& [client, task] : open_->task_of_client) {
    if (!open_->submitted.count(client) && !open_->refused.count(client)) return false;
  }
  return Quorate();
}

bool SyncEngine::Quorate() const {
  return open_->updates >= (options_.min_updates > 0 ? options_.min_updates : options_.min_clients);
}

Status SyncEngine::Tick() {
  PLEXUS_RETURN_IF_ERROR(sticky_error_);
  if (open_ && open_->secure) {  // its stages have their own deadlines
    open_->secure->Tick(clock_->NowMs());
    return AfterSecureStage();
  }
  if (open_ && !open_->persisting.empty())
    return Status::Ok();  // past its deadline: Complete or the next Tick closes it
  if (open_ && open_->tainted) {
    AbandonRound();
    return Status::Ok();
  }
  if (open_ && open_->submitted.size() >= open_->wait_for) return CloseRound();  // e.g. restored full
  if (!open_ || clock_->NowMs() < open_->deadline_ms) return Status::Ok();
  if (Quorate()) return CloseRound();
  AbandonRound();
  return Status::Ok();
}

Result<secagg::View> SyncEngine::SecureAggregation(const std::string& client_id, const std::string& task_id,
                                                   const secagg::Call& call) {
  PLEXUS_RETURN_IF_ERROR(sticky_error_);
  if (!options_.secagg) return Engine::SecureAggregation(client_id, task_id, call);
  PLEXUS_RETURN_IF_ERROR(clients_.Admit(client_id));
  if (!open_ || !open_->secure || !open_->client_of_task.count(task_id)) {
    // A member that finished early asks how its round ended.
    auto it = last_secure_tasks_.find(task_id);
    if (last_secure_ && it != last_secure_tasks_.end() && it->second == client_id &&
        call.kind == secagg::Call::Kind::kQuery) {
      return last_secure_->Exchange(client_id, call, clock_->NowMs());
    }
    return NotFoundError("task '" + task_id +
                         "' is not in the open secure round (it closed, was abandoned, or was "
                         "never this client's)");
  }
  if (open_->client_of_task.at(task_id) != client_id) {
    return PermissionDeniedError("task '" + task_id + "' belongs to another client, not '" + client_id + "'");
  }
  std::shared_ptr<SecureRound> secure = open_->secure;
  Result<secagg::View> view = secure->Exchange(client_id, call, clock_->NowMs());
  PLEXUS_RETURN_IF_ERROR(AfterSecureStage());
  return view;
}

Status SyncEngine::AfterSecureStage() {
  if (!open_ || !open_->secure) return Status::Ok();
  const std::shared_ptr<SecureRound> secure = open_->secure;
  const auto stage = secure->stage();
  if (stage != secagg::Server::Stage::kDone && stage != secagg::Server::Stage::kAborted) return Status::Ok();
  last_secure_ = secure;
  last_secure_tasks_ = open_->client_of_task;
  if (stage == secagg::Server::Stage::kAborted) {
    ++secure_rounds_aborted_;
    last_secure_abort_ = secure->abort_reason();
    AbandonRound();
    return Status::Ok();
  }
  const std::string task_id = "r" + std::to_string(open_->round) + "a" + std::to_string(open_->attempt) + "-group";
  Result<Update> mean = secure->GroupUpdate(published_->model(), task_id);
  Status folded = mean.ok() ? aggregator_->Fold(*mean) : mean.status();
  if (!folded.ok()) {  // e.g. a sum with no weight: nothing to publish, the round is retried
    ++secure_rounds_aborted_;
    last_secure_abort_ = folded.ToString();
    AbandonRound();
    return Status::Ok();
  }
  for (const std::string& client : secure->included()) {
    open_->submitted.insert(client);
    open_->merged.push_back(MergedUpdate{client, open_->task_of_client.at(client)});
    ++open_->updates;
    ++updates_accepted_;
  }
  open_->tally.Add(*mean);
  return CloseRound();
}

void SyncEngine::AbandonRound() {
  ++attempts_;
  open_.reset();
  ++poll_epoch_;
  idle_since_ms_ = clock_->NowMs();
}

Status SyncEngine::CloseRound() {
  if (options_.edge) {
    // Not published: the round's exact sum goes to the parent. Its updates stay in the store's
    // open round until the next version is adopted, so a restarted edge closes it again.
    EdgePartial p;
    p.round = open_->round;
    p.base_version = published_->version();
    RoundRecord totals;
    open_->tally.FillRecord(&totals);
    if (const ExactSum* sum = aggregator_->partial_sum()) {
      p.sum = *sum;
    } else {
      // Edge-robust: the rule's aggregate of these clients, one contribution weighted by their
      // examples. An aggregate that is not finite (or beyond the sum's range) is not sent: the
      // round is retried, as a flat server's would be.
      Result<ModelState> next = aggregator_->Finalize();
      if (!next.ok()) {
        sticky_error_ = next.status().WithContext("aggregate round " + std::to_string(open_->round));
        return sticky_error_;
      }
      next->Subtract(published_->model());
      p.sum = ExactSum(next->num_params());
      if (!AllFinite(next->data()) ||
          !p.sum.Add(next->data(), static_cast<double>(std::max<int64_t>(totals.num_examples, 1))).ok()) {
        ++rounds_refused_nonfinite_;
        AbandonRound();
        return Status::Ok();
      }
    }
    p.num_examples = totals.num_examples;
    p.mean_train_loss = totals.mean_train_loss;
    p.merged = open_->merged;
    p.parent_task = parent_task_;
    if (options_.edge_forward_raw) {
      // The acknowledged updates as stored (durable, so a restarted edge forwards the same).
      Result<std::vector<Update>> stored = store_->ListAcceptedUpdates(open_->round, open_->attempt);
      if (!stored.ok()) {
        sticky_error_ = stored.status().WithContext("read round " + std::to_string(open_->round) + " to forward");
        return sticky_error_;
      }
      std::erase_if(*stored, [&](const Update& u) { return !open_->submitted.count(u.client_id); });
      p.forwarded = std::make_shared<const std::vector<Update>>(std::move(stored).value());
    }
    partial_ = std::move(p);
    parent_round_.reset();
    open_.reset();
    ++poll_epoch_;
    ++attempts_;  // a later round on this version (another task of the parent's) gets task ids of its own
    idle_since_ms_ = clock_->NowMs();
    return Status::Ok();
  }
  // Finalize moves a server optimizer's state; a round that is not published must not keep that:
  // it goes back to head_state_, the state as of the version this round started from.
  Result<ModelState> next = aggregator_->Finalize();
  if (!next.ok()) {
    sticky_error_ = next.status().WithContext("aggregate round " + std::to_string(open_->round));
    return sticky_error_;
  }
  if (!AllFinite(next->data())) {
    // Finite updates can still sum past the float range (two uploads of 3e38): publishing that
    // would poison every later version. The attempt is abandoned like one without quorum and the
    // round retried with a new sample; the updates it held are not merged.
    ++rounds_refused_nonfinite_;
    if (Status restored = aggregator_->RestoreState(head_state_); !restored.ok()) {
      sticky_error_ =
          restored.WithContext("restore the aggregator after a non-finite round " + std::to_string(open_->round));
      return sticky_error_;
    }
    AbandonRound();
    return Status::Ok();
  }
  RoundRecord rec;
  rec.round = open_->round;
  rec.model_version = next->version();
  rec.num_selected = static_cast<int64_t>(open_->task_of_client.size());
  rec.num_updates = open_->updates;  // client updates: an edge's partial sum counts its own
  for (const std::string& client : open_->refused) rec.num_refused += open_->submitted.count(client) ? 0 : 1;
  rec.num_dropped = rec.num_selected - static_cast<int64_t>(open_->submitted.size()) - rec.num_refused;
  rec.attempts = attempts_ + 1;
  open_->tally.FillRecord(&rec);
  rec.merged = open_->merged;
  uint32_t crc32c = 0;
  std::string state = aggregator_->SaveState();
  Status committed = CommitWithDigests(store_, &rec, *next, state, &crc32c);
  if (!committed.ok()) {
    // Memory and disk would disagree from here on: stop accepting state changes.
    sticky_error_ = committed.WithContext("checkpoint of round " + std::to_string(rec.round));
    return sticky_error_;
  }
  head_state_ = std::move(state);
  if (backups_->dynamic()) LearnFromRound(*next);
  open_.reset();
  ++poll_epoch_;
  attempts_ = 0;
  idle_since_ms_ = clock_->NowMs();
  sticky_error_ =
      published_->Publish(std::make_shared<const ModelState>(std::move(next).value()), std::move(rec), crc32c);
  return sticky_error_;
}

void SyncEngine::LearnFromRound(const ModelState& next) {
  const int64_t now = clock_->NowMs();
  for (const auto& [client, since] : open_->handed_out_ms) {
    if (!open_->submitted.count(client)) backups_->ObserveCancelled(client, now - since);
  }
  double step = 0.0;
  const std::span<const float> a = next.data(), b = published_->model().data();
  for (size_t j = 0; j < a.size(); ++j) {
    const double d = static_cast<double>(a[j]) - b[j];
    step += d * d;
  }
  backups_->ObserveRound(open_->update_sq_norms / static_cast<double>(open_->submitted.size()), step);
}

Status SyncEngine::AdoptParentVersion(std::shared_ptr<const ModelState> model, uint64_t round,
                                      const std::string& parent_task, int64_t local_steps) {
  PLEXUS_RETURN_IF_ERROR(sticky_error_);
  if (!options_.edge) return FailedPreconditionError("only an edge aggregator adopts its parent's versions");
  if (local_steps > 0) parent_local_steps_ = local_steps;
  PLEXUS_RETURN_IF_ERROR(model->CheckSameLayout(published_->model()).WithContext("the parent's model"));
  const ModelState::ContentDigests digests = model->Digests();
  const std::string& sha = digests.sha256;
  const bool same_version = model->version() == published_->version();
  if (same_version && sha == published_->sha256()) {
    // The same task (or, after a restart, the round restored from the store, whose task this
    // process never heard of): what is open or closed for it stays.
    const bool same_task = parent_task_ == parent_task || parent_task_.empty();
    if (partial_ && (partial_->parent_task == parent_task || partial_->parent_task.empty())) {
      partial_->parent_task = parent_task;
      parent_task_ = parent_task;
      return Status::Ok();
    }
    if (!partial_ && same_task) {
      parent_task_ = parent_task;
      if (!open_) parent_round_ = round;
      return Status::Ok();
    }
    // Another task on this version: a new round, with task ids of their own (attempts_ moves on).
    if (open_) AbandonRound();
    partial_.reset();
    parent_round_ = round;
    parent_task_ = parent_task;
    ++poll_epoch_;
    return Status::Ok();
  }
  if (model->version() < published_->version() || same_version) {
    return FailedPreconditionError(
        "the parent handed out version " + std::to_string(model->version()) + " (" + sha.substr(0, 12) +
        "), but this edge holds version " + std::to_string(published_->version()) + " (" +
        published_->sha256().substr(0, 12) +
        "): an edge starts from the parent's --model and --seed (or --initial-model), with a database of its own");
  }
  RoundRecord rec;
  rec.round = model->version();
  rec.model_version = model->version();
  rec.model_sha256 = sha;
  std::string state = aggregator_->SaveState();
  if (Status committed = store_->CommitRound(rec, *model, state); !committed.ok()) {
    sticky_error_ = committed.WithContext("checkpoint of the parent's version " + std::to_string(model->version()));
    return sticky_error_;
  }
  head_state_ = std::move(state);
  open_.reset();
  partial_.reset();
  parent_round_ = round;
  parent_task_ = parent_task;
  attempts_ = 0;
  ++poll_epoch_;
  idle_since_ms_ = clock_->NowMs();
  sticky_error_ = published_->Publish(std::move(model), std::move(rec), digests.crc32c);
  return sticky_error_;
}

void SyncEngine::FinishWithParent() {
  parent_finished_ = true;
  ++poll_epoch_;
}

EngineStatus SyncEngine::status() const {
  EngineStatus s;
  s.mode = ModeName(Mode::kSync);
  published_->FillStatus(finished(), &s);
  clients_.FillStatus(&s);
  if (open_) {
    s.round_selected = static_cast<int64_t>(open_->task_of_client.size());
    s.round_received = static_cast<int64_t>(open_->submitted.size());
  }
  s.updates_accepted = updates_accepted_;
  s.updates_refused = updates_refused_;
  s.aggregates_nonfinite = rounds_refused_nonfinite_;
  s.secure_rounds_aborted = secure_rounds_aborted_;
  s.last_secure_abort = last_secure_abort_;
  if (last_secure_) s.last_secure_unmask_ms = last_secure_->unmask_ms();
  if (open_ && open_->secure) s.secure_stage = secagg::StageName(open_->secure->stage());
  if (!sticky_error_.ok()) s.error = sticky_error_.ToString();
  return s;
}

}  // namespace plexus
