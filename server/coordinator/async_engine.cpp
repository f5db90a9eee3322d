#include "server/coordinator/async_engine.h"

#include "server/coordinator/mode.h"

#include "aggregators/registry.h"
#include "aggregators/update_buffer.h"

namespace plexus {

Status AsyncOptions::Validate() const {
  PLEXUS_RETURN_IF_ERROR(ValidateShared());
  if (buffer_size <= 0) return InvalidArgumentError("buffer-size must be positive");
  if (!(server_lr > 0)) return InvalidArgumentError("server-lr must be positive");
  if (max_staleness < 0) return InvalidArgumentError("max-staleness must not be negative");
  if (max_concurrency < 0) return InvalidArgumentError("max-concurrency must not be negative");
  if (task_timeout_ms <= 0) return InvalidArgumentError("task timeout must be positive");
  if (semi_async) PLEXUS_RETURN_IF_ERROR(compass.Validate());
  if (semi_async && commit_outside) {
    return InvalidArgumentError("semi-asynchronous mode commits its versions itself (commit_outside is for FedBuff)");
  }
  // FedBuff merges exactly buffer-size updates per version. (Semi-async groups vary in size: a
  // group smaller than the strategy needs fails when it closes.)
  Result<std::unique_ptr<Aggregator>> made = MakeAggregator(strategy, nullptr);
  if (!made.ok()) return made.status().WithContext("--strategy");
  const std::unique_ptr<Aggregator>& merge = *made;
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
  int64_t buffer_size = options.buffer_size;
  if (options.semi_async) {
    const CompassOptions& c = options.compass;
    e->description_ = "fedcompass(q=" + std::to_string(c.q_min) + ".." + std::to_string(c.q_max) +
                      ",lambda=" + std::to_string(c.latest_time_factor) +
                      ",server_lr=" + std::to_string(options.server_lr) + ",staleness=" + staleness.Describe() +
                      ",merge=" + merge->Describe() + ")";
    e->compass_ = std::make_unique<CompassScheduler>(c);
    buffer_size = INT64_MAX;  // groups decide when to publish
  } else {
    e->description_ = "fedbuff(buffer=" + std::to_string(options.buffer_size) +
                      ",server_lr=" + std::to_string(options.server_lr) + ",staleness=" + staleness.Describe() +
                      ",merge=" + merge->Describe() + ")";
  }
  PLEXUS_ASSIGN_OR_RETURN(e->buffer_,
                          FedBuffBuffer::Create({buffer_size, options.server_lr}, staleness, std::move(merge)));
  PLEXUS_ASSIGN_OR_RETURN(RestoredState restored, RestoreEngineState(store, initial_model));
  e->model_ = std::make_shared<const ModelState>(std::move(restored.model));
  e->model_sha256_ = e->model_->ContentSha256();
  e->head_version_ = e->model_->version();
  e->clients_.Restore(restored.client_ids);
  e->history_ = std::move(restored.history);
  PLEXUS_RETURN_IF_ERROR(EvaluateUnevaluated(evaluator, store, &e->history_));
  PLEXUS_RETURN_IF_ERROR(e->buffer_->Begin(*e->model_));
  PLEXUS_RETURN_IF_ERROR(e->RestoreLogged());
  return e;
}

Status AsyncEngine::RestoreLogged() {
  PLEXUS_ASSIGN_OR_RETURN(std::vector<LoggedUpdate> logged, store_->ListLoggedUpdates());
  for (LoggedUpdate& entry : logged) {
    next_log_seq_ = std::max(next_log_seq_, entry.seq + 1);
    if (head_version_ >= static_cast<uint64_t>(options_.rounds)) {
      logged_done_.push_back(entry.seq);  // the federation finished without it: nothing to publish
      continue;
    }
    // Neither task checks nor the staleness bound: the update was accepted before the restart.
    // One the buffer refuses now (a model of another layout) is forgotten with the next commit,
    // like any refused fold; it must not keep the server from starting.
    if (!Fold({std::move(entry.update), entry.seq}).ok()) continue;
    if (!compass_ && buffer_->size() >= static_cast<size_t>(options_.buffer_size)) PLEXUS_RETURN_IF_ERROR(Publish());
  }
  if (compass_ && buffer_->size() > 0) PLEXUS_RETURN_IF_ERROR(Publish());
  return sticky_error_;
}

Result<AsyncEngine::Logged> AsyncEngine::LogAccepted(Update update) {
  const uint64_t seq = next_log_seq_++;
  if (Status logged = store_->LogUpdate(seq, update); !logged.ok()) {
    sticky_error_ = logged.WithContext("log the update of " + update.client_id);
    return sticky_error_;
  }
  return Logged{std::move(update), seq};
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
  std::string task_id;
  if (auto it = task_of_client_.find(client_id); it != task_of_client_.end()) {
    task_id = it->second;  // re-deliver the open task
  } else if (options_.max_concurrency > 0 && static_cast<int64_t>(tasks_.size()) >= options_.max_concurrency) {
    answer.kind = PollAnswer::Kind::kWait;
    answer.retry_after_ms = options_.poll_retry_ms;
    return answer;
  } else {
    task_id = "v" + std::to_string(model_->version()) + "n" + std::to_string(next_task_++) + "-" + client_id;
    const int64_t steps = compass_ ? compass_->Assign(client_id, now) : options_.task.local_steps;
    tasks_[task_id] = OpenTask{client_id, model_->version(), now, steps};
    task_of_client_[client_id] = task_id;
  }
  const OpenTask& t = tasks_.at(task_id);
  answer.kind = PollAnswer::Kind::kTask;
  answer.task.task_id = task_id;
  answer.task.round = model_->version() + 1;
  answer.task.model_version = t.base_version;
  answer.task.model_sha256 = model_sha256_;
  answer.task.hyperparams = options_.task;
  answer.task.hyperparams.local_steps = t.local_steps;
  answer.task.deadline_ms = t.issued_ms + options_.task_timeout_ms;
  if (t.base_version != model_->version()) {
    // The open task predates the current model: hand out a fresh one instead.
    task_of_client_.erase(client_id);
    tasks_.erase(task_id);
    return Poll(client_id);
  }
  return answer;
}

Status AsyncEngine::CheckOpenTask(const std::string& client_id, const std::string& task_id) const {
  PLEXUS_RETURN_IF_ERROR(clients_.CheckKnown(client_id));
  if (head_version_ >= static_cast<uint64_t>(options_.rounds)) {
    return FailedPreconditionError("the federation has finished; update for task '" + task_id + "' ignored");
  }
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) {
    return NotFoundError("unknown task id '" + task_id + "' (it may have expired or been reported already)");
  }
  if (it->second.client_id != client_id) {
    return Status(StatusCode::kPermissionDenied,
                  "task '" + task_id + "' belongs to another client, not '" + client_id + "'");
  }
  return Status::Ok();
}

Status AsyncEngine::Submit(Update update) {
  PLEXUS_RETURN_IF_ERROR(sticky_error_);
  if (Status admitted = clients_.Admit(update.client_id); !admitted.ok()) {
    ++updates_refused_;
    return admitted;
  }
  if (Status numbers = CheckReportedNumbers(update); !numbers.ok()) {
    ++updates_refused_;
    return numbers;
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
    if (compass_ && !arrived) compass_->Abandon(update.client_id);
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
  // Validated before it is logged, so that a bad update is refused to its sender and never logged.
  if (Status valid =
          CheckUpdate(update, *model_, /*needs_examples=*/compass_ != nullptr, compass_ ? "semiasync" : "fedbuff");
      !valid.ok()) {
    ++updates_refused_;
    end_task(false);
    return valid;
  }
  end_task(true);
  PLEXUS_ASSIGN_OR_RETURN(Logged logged, LogAccepted(std::move(update)));
  if (!compass_) {
    PLEXUS_RETURN_IF_ERROR(Fold(std::move(logged)));
    return buffer_->size() >= static_cast<size_t>(options_.buffer_size) ? Publish() : Status::Ok();
  }
  // Semi-asynchronous: hold it for its group.
  const CompassScheduler::ArrivalResult arrival = compass_->Arrive(logged.update.client_id, clock_->NowMs());
  switch (arrival.kind) {
    case CompassScheduler::Arrival::kUngrouped:
      PLEXUS_RETURN_IF_ERROR(Fold(std::move(logged)));
      return Publish();
    case CompassScheduler::Arrival::kLate:
      late_.push_back(std::move(logged));
      return Status::Ok();
    case CompassScheduler::Arrival::kOnTime:
      held_[arrival.group].push_back(std::move(logged));
      return arrival.group_complete ? PublishGroup(arrival.group) : Status::Ok();
  }
  return Status::Ok();
}

Status AsyncEngine::Fold(Logged logged, uint64_t group) {
  Update& update = logged.update;
  const uint64_t staleness = head_version_ >= update.base_version ? head_version_ - update.base_version : 0;
  MergedUpdate merged{update.client_id, update.task_id, staleness, group,
                      compass_ ? compass_->SpeedOf(update.client_id) : std::nullopt};
  const int64_t examples = update.num_examples;
  const auto loss = update.metrics.find("train_loss");
  const std::optional<double> train_loss =
      loss != update.metrics.end() ? std::optional<double>(loss->second) : std::nullopt;
  Result<bool> added = buffer_->Add(std::move(update), staleness);
  logged_done_.push_back(logged.seq);  // merged into the next version, or refused for good
  if (!added.ok()) {
    ++updates_refused_;
    return added.status();
  }
  merged_.push_back(std::move(merged));
  ++updates_accepted_;
  buffered_examples_ += examples;
  if (train_loss) {
    buffered_loss_ += *train_loss;
    ++buffered_loss_count_;
  }
  return Status::Ok();
}

Status AsyncEngine::PublishGroup(uint64_t group) {
  compass_->Close(group);
  std::vector<Logged> updates = std::move(held_[group]);
  held_.erase(group);
  const size_t on_time = updates.size();
  for (Logged& u : late_) updates.push_back(std::move(u));
  late_.clear();
  for (size_t i = 0; i < updates.size(); ++i) (void)Fold(std::move(updates[i]), i < on_time ? group : 0);
  return buffer_->size() > 0 ? Publish() : Status::Ok();
}

Status AsyncEngine::Publish() {
  if (compass_ && head_version_ + 1 >= static_cast<uint64_t>(options_.rounds)) {
    // The federation's last version: every update still held for a group or late was
    // acknowledged, and no later version would take it, so it goes into this one.
    for (auto& [group, held] : held_) {
      for (Logged& u : held) (void)Fold(std::move(u), group);
    }
    held_.clear();
    for (Logged& u : late_) (void)Fold(std::move(u), 0);
    late_.clear();
  }
  const auto merged = static_cast<int64_t>(buffer_->size());
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
    merged_.clear();
    buffered_examples_ = 0;
    buffered_loss_ = 0.0;
    buffered_loss_count_ = 0;
    ++poll_epoch_;
    if (Status begun = buffer_->Begin(head_model_ ? *head_model_ : *model_); !begun.ok()) {
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
  rec.num_examples = buffered_examples_;
  rec.mean_train_loss = buffered_loss_count_ ? buffered_loss_ / static_cast<double>(buffered_loss_count_) : 0.0;
  buffered_examples_ = 0;
  buffered_loss_ = 0.0;
  buffered_loss_count_ = 0;
  head_version_ = next->version();
  auto shared = std::make_shared<ModelState>(std::move(next).value());
  head_model_ = shared;
  if (Status begun = buffer_->Begin(*shared); !begun.ok()) {
    sticky_error_ = begun.WithContext("buffer after version " + std::to_string(rec.model_version));
    return sticky_error_;
  }
  // FedBuff's step is stateless: no aggregator state to commit.
  commits_queued_.push_back(PendingCommit{std::move(rec), std::move(shared), /*aggregator_state=*/{}});
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
  if (commits_running_ == 0 || version != model_->version() + 1) {
    return InternalError("version " + std::to_string(version) + " handed back out of order (the last committed is " +
                         std::to_string(model_->version()) + ")");
  }
  --commits_running_;
  PLEXUS_RETURN_IF_ERROR(sticky_error_);
  if (!committed.ok()) {
    sticky_error_ = committed.WithContext("checkpoint of version " + std::to_string(version));
    return sticky_error_;
  }
  if (head_model_ == commit.model) head_model_.reset();  // it becomes model_
  model_ = std::move(commit.model);
  ++poll_epoch_;
  model_sha256_ = commit.record.model_sha256;
  sticky_error_ = EvaluatePublished(evaluator_, store_, *model_, &commit.record);
  history_.push_back(std::move(commit.record));
  return sticky_error_;
}

Status AsyncEngine::Tick() {
  PLEXUS_RETURN_IF_ERROR(sticky_error_);
  const int64_t now = clock_->NowMs();
  for (auto it = tasks_.begin(); it != tasks_.end();) {
    if (now - it->second.issued_ms >= options_.task_timeout_ms) {
      task_of_client_.erase(it->second.client_id);
      if (compass_) compass_->Abandon(it->second.client_id);
      it = tasks_.erase(it);
      ++poll_epoch_;
    } else {
      ++it;
    }
  }
  if (compass_) {
    for (uint64_t group : compass_->Overdue(now)) {
      if (finished()) break;
      PLEXUS_RETURN_IF_ERROR(PublishGroup(group));
    }
  }
  return Status::Ok();
}

EngineStatus AsyncEngine::status() const {
  EngineStatus s;
  s.mode = ModeName(compass_ ? Mode::kSemiAsync : Mode::kAsync);
  s.model_version = model_->version();
  s.round = finished() ? model_->version() : model_->version() + 1;
  s.known_clients = clients_.known_count();
  s.connected_clients = static_cast<int64_t>(clients_.Connected().size());
  s.round_selected = static_cast<int64_t>(tasks_.size());
  s.round_received = static_cast<int64_t>(buffer_->size() + late_.size());
  for (const auto& [group, held] : held_) s.round_received += static_cast<int64_t>(held.size());
  s.updates_accepted = updates_accepted_;
  s.updates_refused = updates_refused_;
  s.aggregates_nonfinite = versions_refused_nonfinite_;
  s.updates_stale = updates_stale_;
  s.last_accuracy = LastAccuracy(history_);
  if (compass_) s.schedule = compass_->Clients();
  s.finished = finished();
  if (!sticky_error_.ok()) s.error = sticky_error_.ToString();
  return s;
}

}  // namespace plexus
