#include "server/coordinator/async_engine.h"

#include <cstdlib>

#include "server/coordinator/compass_arrivals.h"
#include "server/coordinator/mode.h"

#include "aggregators/partial_sum_delta.h"
#include "aggregators/registry.h"
#include "aggregators/update_buffer.h"
#include "aggregators/update_bundle.h"

namespace plexus {

Status AsyncOptions::Validate() const {
  PLEXUS_RETURN_IF_ERROR(ValidateShared());
  if (buffer_size <= 0) return InvalidArgumentError("buffer-size must be positive");
  if (!(server_lr > 0)) return InvalidArgumentError("server-lr must be positive");
  if (max_staleness < 0) return InvalidArgumentError("max-staleness must not be negative");
  if (max_concurrency < 0) return InvalidArgumentError("max-concurrency must not be negative");
  if (task_timeout_ms <= 0) return InvalidArgumentError("task timeout must be positive");
  if (semi_async) PLEXUS_RETURN_IF_ERROR(compass.Validate());
  if (secagg) {
    if (semi_async) {
      return InvalidArgumentError(
          "--secagg with --mode semiasync: FedCompass's groups are formed by speed as tasks "
          "arrive; secure groups run in sync rounds and FedBuff buffers (--mode sync|async)");
    }
    const int64_t members = secagg->GroupSize(buffer_size);
    if (members < 3) {
      return InvalidArgumentError("--secagg with --buffer-size " + std::to_string(buffer_size) +
                                  ": a secure group (buffer-size + spare = " + std::to_string(members) +
                                  " members) needs at least 3");
    }
    PLEXUS_RETURN_IF_ERROR(secagg->GraphFor(static_cast<int>(std::min<int64_t>(members, 100000))).status());
  }
  if (semi_async && commit_outside) {
    return InvalidArgumentError("semi-asynchronous mode commits its versions itself (commit_outside is for FedBuff)");
  }
  // FedBuff merges exactly buffer-size updates per version. (Semi-async groups vary in size: a
  // group smaller than the strategy needs fails when it closes.)
  Result<std::unique_ptr<Aggregator>> made = MakeAggregator(strategy, nullptr);
  if (!made.ok()) return made.status().WithContext("--strategy");
  const std::unique_ptr<Aggregator>& merge = *made;
  if (secagg) PLEXUS_RETURN_IF_ERROR(CheckSecureStrategy(*secagg, strategy, *merge));
  if (const size_t fewest = merge->min_updates(); !semi_async && static_cast<size_t>(buffer_size) < fewest) {
    return InvalidArgumentError("strategy " + merge->Describe() + " needs at least " + std::to_string(fewest) +
                                " updates per version, but buffer-size is " + std::to_string(buffer_size) +
                                ": raise --buffer-size to " + std::to_string(fewest) + " or lower the strategy's f");
  }
  return StalenessRule::Parse(staleness).status();
}

AsyncEngine::AsyncEngine(const AsyncOptions& options, Store* store, const Clock* clock, ModelEvaluator* evaluator)
    : options_(options),
      store_(store),
      clock_(clock),
      evaluator_(evaluator),
      clients_(store, clock, options.client_timeout_ms) {}

Result<std::unique_ptr<AsyncEngine>> AsyncEngine::Open(const AsyncOptions& options, const ModelState& initial_model,
                                                       Store* store, const Clock* clock, ModelEvaluator* evaluator,
                                                       ThreadPool* pool) {
  PLEXUS_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<AsyncEngine> e(new AsyncEngine(options, store, clock, evaluator));
  PLEXUS_ASSIGN_OR_RETURN(StalenessRule staleness, StalenessRule::Parse(options.staleness));
  PLEXUS_ASSIGN_OR_RETURN(std::unique_ptr<Aggregator> merge, MakeAggregator(options.strategy, pool));
  if (options.semi_async) {
    e->policy_ = std::make_unique<CompassArrivals>(options.compass);
  } else {
    // A secure group's mean is the whole buffer: one arrival makes a version.
    e->policy_ = MakeBufferArrivals(options.secagg ? 1 : options.buffer_size);
  }
  e->description_ = e->policy_->Describe("server_lr=" + std::to_string(options.server_lr) +
                                         ",staleness=" + staleness.Describe() + ",merge=" + merge->Describe());
  if (options.secagg) {
    e->description_ = "fedbuff(buffer_size=" + std::to_string(options.buffer_size) +
                      ",server_lr=" + std::to_string(options.server_lr) + ",staleness=" + staleness.Describe() +
                      ",merge=" + merge->Describe() + ") over secure aggregation groups of " +
                      std::to_string(options.secagg->GroupSize(options.buffer_size)) + " (" +
                      options.secagg->Describe() + ")";
  }
  PLEXUS_ASSIGN_OR_RETURN(e->buffer_, FedBuffBuffer::Create({e->policy_->buffer_capacity(), options.server_lr},
                                                            staleness, std::move(merge)));
  RestoredState restored;
  PLEXUS_ASSIGN_OR_RETURN(PublishedVersions published,
                          PublishedVersions::Open(store, evaluator, initial_model, &restored));
  e->published_.emplace(std::move(published));
  e->head_version_ = e->published_->version();
  e->acknowledged_.AddMerged(e->published_->history());
  PLEXUS_RETURN_IF_ERROR(e->CountOpening());
  if (options.secagg) {
    e->secure_ = std::make_unique<SecureBuffers>(
        *options.secagg, options.buffer_size, options.secagg->InputStageMs(options.task_timeout_ms), e->opening_, pool);
  }
  e->clients_.Restore(restored.client_ids);
  PLEXUS_RETURN_IF_ERROR(e->buffer_->RestoreState(restored.aggregator_state)
                             .WithContext("restore the strategy's state (was --strategy changed?)"));
  e->head_state_ = std::make_shared<const std::string>(std::move(restored.aggregator_state));
  PLEXUS_RETURN_IF_ERROR(e->buffer_->Begin(e->published_->model()));
  PLEXUS_RETURN_IF_ERROR(e->RestoreLogged());
  return e;
}

Status AsyncEngine::CountOpening() {
  // Task ids restart their counter with each process: the opening's number keeps them unique,
  // which AcknowledgedTasks needs (a reissued id would make a new update look like a retry).
  constexpr char kKey[] = "async_engine_openings";
  Result<std::string> before = store_->GetMeta(kKey);
  if (!before.ok() && before.status().code() != StatusCode::kNotFound) return before.status();
  if (before.ok()) opening_ = std::strtoull(before->c_str(), nullptr, 10) + 1;
  return store_->PutMeta(kKey, std::to_string(opening_));
}

Status AsyncEngine::RestoreLogged() {
  PLEXUS_ASSIGN_OR_RETURN(std::vector<LoggedUpdate> logged, store_->ListLoggedUpdates());
  for (LoggedUpdate& entry : logged) {
    next_log_seq_ = std::max(next_log_seq_, entry.seq + 1);
    acknowledged_.Add(entry.update.client_id, entry.update.task_id);
    if (head_version_ >= static_cast<uint64_t>(options_.rounds)) {
      logged_done_.push_back(entry.seq);  // the federation finished without it: nothing to publish
      continue;
    }
    // Neither task checks nor the staleness bound: the update was accepted before the restart.
    PLEXUS_RETURN_IF_ERROR(policy_->Restore(std::move(entry), this));
  }
  PLEXUS_RETURN_IF_ERROR(policy_->RestoreDone(this));
  return sticky_error_;
}

Result<LoggedUpdate> AsyncEngine::LogAccepted(Update update) {
  const uint64_t seq = next_log_seq_++;
  if (Status logged = store_->LogUpdate(seq, update); !logged.ok()) {
    sticky_error_ = logged.WithContext("log the update of " + update.client_id);
    return sticky_error_;
  }
  return LoggedUpdate{seq, std::move(update)};
}

Result<std::string> AsyncEngine::Join(const ClientRecord& client) {
  PLEXUS_RETURN_IF_ERROR(sticky_error_);
  return clients_.Join(client);
}

Result<PollAnswer> AsyncEngine::Poll(const std::string& client_id) {
  PLEXUS_RETURN_IF_ERROR(sticky_error_);
  PLEXUS_RETURN_IF_ERROR(clients_.Admit(client_id));
  const int64_t now = clock_->NowMs();
  PollAnswer answer;
  if (finished()) {
    answer.kind = PollAnswer::Kind::kFinished;
    return answer;
  }
  if (head_version_ >= static_cast<uint64_t>(options_.rounds)) {
    // The last version is aggregated and being committed: no task would count.
    answer.kind = PollAnswer::Kind::kWait;
    answer.retry_after_ms = options_.poll_retry_ms;
    return answer;
  }
  if (secure_) return PollSecure(client_id, now);
  std::string task_id;
  if (auto it = task_of_client_.find(client_id); it != task_of_client_.end()) {
    task_id = it->second;  // re-deliver the open task
  } else if ((options_.max_concurrency > 0 && static_cast<int64_t>(tasks_.size()) >= options_.max_concurrency) ||
             !buffer_->MayContribute(client_id, published_->version())) {
    // Full, or the strategy would not take this client's update now (DP-FTRL's cap per tree).
    answer.kind = PollAnswer::Kind::kWait;
    answer.retry_after_ms = options_.poll_retry_ms;
    return answer;
  } else {
    task_id = "v" + std::to_string(published_->version()) + (opening_ ? "o" + std::to_string(opening_) : "") + "n" +
              std::to_string(next_task_++) + "-" + client_id;
    const int64_t steps = policy_->StepsFor(client_id, options_.task.local_steps, now);
    tasks_[task_id] = OpenTask{client_id, published_->version(), now, steps};
    task_of_client_[client_id] = task_id;
  }
  const OpenTask& t = tasks_.at(task_id);
  answer.kind = PollAnswer::Kind::kTask;
  answer.task.task_id = task_id;
  answer.task.round = published_->version() + 1;
  answer.task.model_version = t.base_version;
  answer.task.model_sha256 = published_->sha256();
  answer.task.model_crc32c = published_->crc32c();
  answer.task.hyperparams = options_.task;
  answer.task.hyperparams.local_steps = t.local_steps;
  answer.task.deadline_ms = t.issued_ms + options_.task_timeout_ms;
  if (t.base_version != published_->version()) {
    // The open task predates the current model: hand out a fresh one instead.
    task_of_client_.erase(client_id);
    tasks_.erase(task_id);
    return Poll(client_id);
  }
  return answer;
}

Status AsyncEngine::CheckOpenTask(const std::string& client_id, const std::string& task_id) const {
  PLEXUS_RETURN_IF_ERROR(clients_.CheckKnown(client_id));
  if (acknowledged_.Contains(client_id, task_id)) return Status::Ok();  // sent again: Submit acknowledges it
  if (head_version_ >= static_cast<uint64_t>(options_.rounds)) {
    return FailedPreconditionError("the federation has finished; update for task '" + task_id + "' ignored");
  }
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) {
    return NotFoundError("unknown task id '" + task_id + "' (it may have expired or been reported already)");
  }
  if (it->second.client_id != client_id) {
    return PermissionDeniedError("task '" + task_id + "' belongs to another client, not '" + client_id + "'");
  }
  return Status::Ok();
}

Result<AdmittedUpdate> AsyncEngine::Admit(Update update) {
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
  const bool bundle = dynamic_cast<const UpdateBundle*>(update.coded.get()) != nullptr;
  if (secure_) {
    ++updates_refused_;
    return FailedPreconditionError(
        "this server runs secure aggregation: updates go through its stages (SecureAggregation), never in the clear");
  }
  if (Status open = CheckOpenTask(update.client_id, update.task_id); !open.ok()) {
    ++updates_refused_;
    return open;
  }
  const OpenTask task = tasks_.at(update.task_id);
  auto end_task = [&](bool arrived) {
    tasks_.erase(update.task_id);
    task_of_client_.erase(update.client_id);
    ++poll_epoch_;
    if (!arrived) policy_->Abandon(update.client_id);
  };
  if (update.base_version != task.base_version) {
    ++updates_refused_;
    end_task(false);
    return FailedPreconditionError("update claims base version " + std::to_string(update.base_version) +
                                   " but its task started from version " + std::to_string(task.base_version));
  }
  const uint64_t staleness = head_version_ - task.base_version;
  if (staleness > static_cast<uint64_t>(options_.max_staleness)) {
    ++updates_refused_;
    ++updates_stale_;
    end_task(false);
    return FailedPreconditionError("update is " + std::to_string(staleness) + " versions stale (the limit is " +
                                   std::to_string(options_.max_staleness) + "); poll for a task on the current model");
  }
  // Validated before it is logged, so that a bad update is refused to its sender and never logged;
  // a bundle's forwarded updates each (coded ones are decoded when folded, if the merge needs).
  const char* strategy = policy_->mode() == Mode::kSemiAsync ? "semiasync" : "fedbuff";
  for (const Update& inner : bundle ? BundledOrSelf(update) : std::span<const Update>()) {  // a view: no copies
    if (Status valid = CheckUpdate(inner, published_->model(), policy_->needs_examples(), strategy, true);
        !valid.ok()) {
      ++updates_refused_;
      end_task(false);
      return valid.WithContext("forwarded update of " + update.client_id + "/" + inner.client_id);
    }
  }
  if (Status valid = bundle ? Status::Ok()
                            : CheckUpdate(update, published_->model(), policy_->needs_examples(), strategy,
                                          buffer_->folds_coded());
      !valid.ok()) {
    ++updates_refused_;
    end_task(false);
    return valid;
  }
  end_task(true);
  AdmittedUpdate admitted{std::move(update)};
  admitted.log_seq = next_log_seq_++;
  return admitted;
}

Status AsyncEngine::Persist(const AdmittedUpdate& admitted) const {
  if (admitted.already_acknowledged) return Status::Ok();
  return store_->LogUpdate(admitted.log_seq, admitted.update);
}

Status AsyncEngine::Complete(AdmittedUpdate admitted, Status persisted) {
  if (admitted.already_acknowledged) return Status::Ok();
  Update& update = admitted.update;
  if (!persisted.ok()) {
    sticky_error_ = persisted.WithContext("log the update of " + update.client_id);
    return sticky_error_;
  }
  PLEXUS_RETURN_IF_ERROR(sticky_error_);
  if (head_version_ >= static_cast<uint64_t>(options_.rounds)) {
    // The last version was published while this update was being stored: no version will merge
    // it, so it is not acknowledged (its log entry is forgotten like any left after the end).
    ++updates_refused_;
    return FailedPreconditionError("the federation finished while the update of task '" + update.task_id +
                                   "' was being stored; it is not merged");
  }
  acknowledged_.Add(update.client_id, update.task_id);
  return policy_->Arrive(LoggedUpdate{admitted.log_seq, std::move(update)}, clock_->NowMs(), this);
}

Status AsyncEngine::Fold(LoggedUpdate logged, uint64_t group) {
  Update& update = logged.update;
  const uint64_t staleness = head_version_ >= update.base_version ? head_version_ - update.base_version : 0;
  // One entry per client update: an edge's partial sum lists those inside it.
  std::vector<MergedUpdate> entries = MergedEntriesOf(update, /*hash=*/false);
  const std::optional<double> speed = policy_->SpeedOf(update.client_id);
  for (MergedUpdate& m : entries) {
    m.staleness = staleness;
    m.group = group;
    m.ms_per_step = speed;
  }
  std::vector<std::pair<std::string, std::string>> members;
  members.swap(group_members_);
  UpdateTally counted;
  for (const Update& inner : BundledOrSelf(update)) counted.Add(inner);
  logged_done_.push_back(logged.seq);  // merged into the next version, or refused for good
  if (dynamic_cast<const UpdateBundle*>(update.coded.get()) != nullptr) {
    // Each forwarded update as if its client had sent it, with the staleness of the edge's task
    // (the buffer counts them, so a bundle may fill it past its size, as a partial sum does; in
    // FedCompass the edge is one member of its group, its updates all the group's).
    size_t folded = 0;
    for (Update& inner : UnbundledUpdates(update)) {
      if (inner.coded && !buffer_->folds_coded()) MaterializeCoded(inner, model());
      inner.base_version = update.base_version;
      const std::string client = inner.client_id;
      if (Result<bool> added = buffer_->Add(std::move(inner), staleness); !added.ok()) {
        ++updates_refused_;
        tally_ += counted;
        for (size_t i = 0; i < folded && i < entries.size(); ++i) merged_.push_back(std::move(entries[i]));
        updates_accepted_ += static_cast<int64_t>(folded);
        return added.status().WithContext("forwarded update of " + client);
      }
      ++folded;
    }
    for (MergedUpdate& m : entries) merged_.push_back(std::move(m));
    updates_accepted_ += static_cast<int64_t>(folded);
    tally_ += counted;
    return Status::Ok();
  }
  // Logged coded by a server whose strategy folded codes; this one's may not.
  if (!buffer_->folds_coded()) MaterializeCoded(update, model());
  Result<bool> added = buffer_->Add(std::move(update), staleness);
  if (!added.ok()) {
    ++updates_refused_;
    return added.status();
  }
  if (members.empty()) {
    for (MergedUpdate& m : entries) merged_.push_back(std::move(m));
    ++updates_accepted_;
  } else {  // a secure group's mean: the version merges its members' updates
    for (const auto& [client, task] : members) {
      merged_.push_back(MergedUpdate{client, task, staleness, group, policy_->SpeedOf(client)});
      ++updates_accepted_;
    }
  }
  tally_ += counted;
  return Status::Ok();
}

Status AsyncEngine::Publish() {
  if (head_version_ + 1 >= static_cast<uint64_t>(options_.rounds)) {
    // The federation's last version: every update the policy still holds was acknowledged, and
    // no later version would take it, so it goes into this one.
    policy_->FoldAllHeld(this);
  }
  const auto merged = static_cast<int64_t>(secure_ ? merged_.size() : buffer_->size());
  // Flush moves the strategy's state; a version that is not published must not keep that: it
  // goes back to head_state_, the state as of the version this Flush starts from.
  Result<ModelState> next = buffer_->Flush();
  if (!next.ok()) {
    sticky_error_ = next.status().WithContext("publish version " + std::to_string(head_version_ + 1));
    return sticky_error_;
  }
  if (!AllFinite(next->data())) {
    // Finite updates can still sum past the float range: publishing that would poison every
    // later version. The buffer's updates are dropped (acknowledged, but never merged) and the
    // next buffer starts again from the newest version.
    ++versions_refused_nonfinite_;
    if (Status restored = buffer_->RestoreState(*head_state_); !restored.ok()) {
      sticky_error_ = restored.WithContext("restore the strategy after a non-finite aggregate");
      return sticky_error_;
    }
    merged_.clear();
    tally_ = {};
    ++poll_epoch_;
    if (Status begun = buffer_->Begin(head_model_ ? *head_model_ : published_->model()); !begun.ok()) {
      sticky_error_ = begun.WithContext("buffer after a non-finite aggregate");
      return sticky_error_;
    }
    return Status::Ok();
  }
  RoundRecord rec;
  rec.round = next->version();
  rec.model_version = next->version();
  rec.num_selected = merged;
  rec.num_updates = merged;
  rec.merged = std::move(merged_);
  merged_.clear();
  rec.logged_done = std::move(logged_done_);
  logged_done_.clear();
  tally_.FillRecord(&rec);
  tally_ = {};
  head_version_ = next->version();
  auto shared = std::make_shared<ModelState>(std::move(next).value());
  head_model_ = shared;
  if (Status begun = buffer_->Begin(*shared); !begun.ok()) {
    sticky_error_ = begun.WithContext("buffer after version " + std::to_string(rec.model_version));
    return sticky_error_;
  }
  // The merge strategy's state (an adaptive clip, DP-FTRL's tree) goes with the version.
  head_state_ = std::make_shared<const std::string>(buffer_->SaveState());
  commits_queued_.push_back(PendingCommit{std::move(rec), std::move(shared), head_state_});
  if (options_.commit_outside) return Status::Ok();
  std::optional<PendingCommit> commit = TakeCommit();
  Status committed = commit->Run(store_);
  return FinishCommit(std::move(*commit), std::move(committed));
}

std::optional<PendingCommit> AsyncEngine::TakeCommit() {
  if (!sticky_error_.ok() || commits_queued_.empty() || commits_running_ > 0) return std::nullopt;
  PendingCommit commit = std::move(commits_queued_.front());
  commits_queued_.pop_front();
  ++commits_running_;
  return commit;
}

Status AsyncEngine::FinishCommit(PendingCommit commit, Status committed) {
  const uint64_t version = commit.record.model_version;
  if (commits_running_ == 0 || version != published_->version() + 1) {
    return InternalError("version " + std::to_string(version) + " handed back out of order (the last committed is " +
                         std::to_string(published_->version()) + ")");
  }
  --commits_running_;
  PLEXUS_RETURN_IF_ERROR(sticky_error_);
  if (!committed.ok()) {
    sticky_error_ = committed.WithContext("checkpoint of version " + std::to_string(version));
    return sticky_error_;
  }
  if (head_model_ == commit.model) head_model_.reset();  // it becomes the published model
  ++poll_epoch_;
  sticky_error_ = published_->Publish(std::move(commit.model), std::move(commit.record), commit.model_crc32c);
  return sticky_error_;
}

Status AsyncEngine::Refused(const std::string& client_id, const std::string& task_id) {
  PLEXUS_RETURN_IF_ERROR(sticky_error_);
  auto it = tasks_.find(task_id);
  if (it == tasks_.end() || it->second.client_id != client_id) return Status::Ok();
  tasks_.erase(it);
  task_of_client_.erase(client_id);
  policy_->Abandon(client_id);
  ++poll_epoch_;
  return Status::Ok();
}

Status AsyncEngine::Leave(const std::string& client_id) {
  PLEXUS_RETURN_IF_ERROR(sticky_error_);
  clients_.Forget(client_id);
  if (secure_) secure_->Forget(client_id);
  auto it = task_of_client_.find(client_id);
  if (it == task_of_client_.end()) return Status::Ok();
  const std::string task = it->second;
  return Refused(client_id, task);
}

Status AsyncEngine::Tick() {
  PLEXUS_RETURN_IF_ERROR(sticky_error_);
  const int64_t now = clock_->NowMs();
  for (auto it = tasks_.begin(); it != tasks_.end();) {
    if (now - it->second.issued_ms >= options_.task_timeout_ms) {
      task_of_client_.erase(it->second.client_id);
      policy_->Abandon(it->second.client_id);
      it = tasks_.erase(it);
      ++poll_epoch_;
    } else {
      ++it;
    }
  }
  if (secure_) {
    secure_->Tick(now);
    PLEXUS_RETURN_IF_ERROR(FoldEndedGroups());
  }
  return policy_->Tick(now, this);
}

Result<PollAnswer> AsyncEngine::PollSecure(const std::string& client_id, int64_t now_ms) {
  PollAnswer answer;
  answer.kind = PollAnswer::Kind::kWait;
  answer.retry_after_ms = options_.poll_retry_ms;
  if (options_.max_concurrency > 0 && static_cast<int64_t>(secure_->members()) >= options_.max_concurrency &&
      !secure_->Knows(client_id)) {
    return answer;  // full: only those already waiting or in a group go on
  }
  const uint64_t started_before = secure_->groups_started();
  Result<std::optional<SecureBuffers::Assignment>> a =
      secure_->Poll(client_id, clients_.Connected(), published_->model(), now_ms);
  if (!a.ok()) {
    sticky_error_ = a.status().WithContext("start a secure group");
    return sticky_error_;
  }
  if (secure_->groups_started() != started_before) ++poll_epoch_;  // its waiting members have tasks now
  if (!a->has_value()) return answer;
  const SecureBuffers::Assignment& t = **a;
  answer.kind = PollAnswer::Kind::kTask;
  answer.task.task_id = t.task_id;
  answer.task.round = published_->version() + 1;
  // The group's base; should a version have been published since the group formed, the member
  // trains from the model it downloads, the newest (its group's mean is then weighted as one
  // version staler than its training was).
  answer.task.model_version = published_->version();
  answer.task.model_sha256 = published_->sha256();
  answer.task.model_crc32c = published_->crc32c();
  answer.task.hyperparams = options_.task;
  answer.task.deadline_ms = t.issued_ms + options_.task_timeout_ms;
  return answer;
}

Result<secagg::View> AsyncEngine::SecureAggregation(const std::string& client_id, const std::string& task_id,
                                                    const secagg::Call& call) {
  PLEXUS_RETURN_IF_ERROR(sticky_error_);
  if (!secure_) return Engine::SecureAggregation(client_id, task_id, call);
  PLEXUS_RETURN_IF_ERROR(clients_.Admit(client_id));
  Result<secagg::View> view = secure_->Exchange(client_id, task_id, call, clock_->NowMs());
  PLEXUS_RETURN_IF_ERROR(FoldEndedGroups());
  return view;
}

Status AsyncEngine::FoldEndedGroups() {
  for (SecureBuffers::Ended& ended : secure_->TakeEnded(published_->model())) {
    ++poll_epoch_;  // its members poll for their next group
    if (!ended.mean.ok() || head_version_ >= static_cast<uint64_t>(options_.rounds)) continue;
    const uint64_t staleness = head_version_ - std::min(head_version_, ended.base_version);
    if (staleness > static_cast<uint64_t>(options_.max_staleness)) {
      updates_stale_ += static_cast<int64_t>(ended.included.size());
      updates_refused_ += static_cast<int64_t>(ended.included.size());
      continue;
    }
    PLEXUS_ASSIGN_OR_RETURN(LoggedUpdate logged, LogAccepted(std::move(ended.mean).value()));
    acknowledged_.Add(logged.update.client_id, logged.update.task_id);
    group_members_ = std::move(ended.included);
    PLEXUS_RETURN_IF_ERROR(policy_->Arrive(std::move(logged), clock_->NowMs(), this));
    group_members_.clear();
  }
  return sticky_error_;
}

EngineStatus AsyncEngine::status() const {
  EngineStatus s;
  s.mode = ModeName(policy_->mode());
  published_->FillStatus(finished(), &s);
  clients_.FillStatus(&s);
  s.round_selected = static_cast<int64_t>(tasks_.size());
  s.round_received = static_cast<int64_t>(buffer_->size() + policy_->held());
  s.updates_accepted = updates_accepted_;
  s.updates_refused = updates_refused_;
  s.aggregates_nonfinite = versions_refused_nonfinite_;
  s.updates_stale = updates_stale_;
  s.schedule = policy_->Schedule();
  if (secure_) {
    s.round_selected = static_cast<int64_t>(secure_->members());
    s.secure_stage = secure_->stage();
    s.secure_rounds_aborted = secure_->aborted();
    s.last_secure_abort = secure_->last_abort();
    s.last_secure_unmask_ms = secure_->last_unmask_ms();
  }
  if (!sticky_error_.ok()) s.error = sticky_error_.ToString();
  return s;
}

}  // namespace plexus
