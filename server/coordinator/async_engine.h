// AsyncEngine: asynchronous federation (FedBuff, Nguyen et al. AISTATS 2022; FedAsync, Xie et al.
// 2019, as FedBuff with a buffer of one). Every client that polls gets a task on the current
// model at once (up to `max_concurrency` tasks in flight); nobody waits for anybody. Each arriving
// delta is weighted by s(staleness) (staleness = versions published since its task started)
// and folded into the buffer's merge strategy; every `buffer_size` updates the engine publishes
// x + server_lr * (merged - x) as a new version, checkpoints it with its record in one store
// transaction and evaluates it (with `commit_outside`, the caller runs the hash and the commit
// without its lock, and the version is served once they are done). Updates staler than
// `max_staleness` are refused.
// With buffer_size = 1 this is FedAsync in delta form: x += server_lr * s(tau) * delta.
//
// When a version is published is its ArrivalPolicy's call (arrival_policy.h): FedBuff's every
// `buffer_size` updates, or, in semi-asynchronous mode (FedCompass, `semi_async`),
// CompassArrivals': tasks get local steps so that clients of similar speed arrive together, and
// each group (with any late arrivals from earlier groups) is merged and published when its last
// member arrives or its latest time passes (checked by Tick). buffer_size does not apply there.
//
// Durability: every update is logged in the store (Store::LogUpdate) before Submit (or Complete)
// returns OK,
// and each committed version's record names the log entries it makes obsolete. Open folds the
// entries still logged (acknowledged, but in no committed version when the server stopped) into
// the buffer again, in the order they were acknowledged, with their staleness counted from the
// restored version, and publishes what they fill (semi-async: all of them as one version).
//
// With `secagg` (FedBuff only) each buffer is a secure aggregation group (secure_buffers.h): clients
// get their tasks as the group forms, send masked updates through SecureAggregation in any order,
// and the group's mean is logged, folded with the staleness of the group's base version and
// published as one version; Submit refuses updates in the clear.
//
// Owns its buffer; borrows store, clock, evaluator and pool. Single-threaded.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <set>

#include "aggregators/fedbuff.h"
#include "core/clock.h"
#include "core/thread_pool.h"
#include "server/coordinator/acknowledged_tasks.h"
#include "server/coordinator/arrival_policy.h"
#include "server/coordinator/client_registry.h"
#include "server/coordinator/compass_scheduler.h"
#include "server/coordinator/engine.h"
#include "server/coordinator/evaluator.h"
#include "server/coordinator/published_versions.h"
#include "server/coordinator/secure_buffers.h"
#include "server/coordinator/shared_engine_options.h"
#include "server/coordinator/update_tally.h"

namespace plexus {

// Asynchronous options beside the shared ones (SharedEngineOptions: rounds, client timeout, poll retry,
// task hyperparameters).
struct AsyncOptions : SharedEngineOptions {
  int64_t buffer_size = 1;                         // K: updates per published version
  double server_lr = 1.0;                          // FedBuff's eta_g (FedAsync's alpha when K = 1)
  std::string staleness = "poly:a=0.5";            // s(tau), see aggregators/staleness.h
  int64_t max_staleness = 10;                      // refuse updates more versions behind than this
  int64_t max_concurrency = 0;                     // tasks in flight at once; 0 = no bound
  std::string strategy = "fedavg:weighted=false";  // the buffer's merge (uniform mean: B / K)
  int64_t task_timeout_ms = 600000;                // a task not reported by then is forgotten
  bool semi_async = false;                         // FedCompass scheduling (task.local_steps is then chosen per task)
  CompassOptions compass;
  // Publishing queues the version's hash and commit for the caller (Engine::TakeCommit) instead
  // of running them inside Submit, so that a server can run them outside its lock while updates
  // keep folding into the next buffer. Clients get tasks on the last committed version meanwhile;
  // an update's staleness counts the versions aggregated since its task started, committed or
  // not. Not with semi_async.
  bool commit_outside = false;
  // Secure aggregation (FedBuff only): each buffer is a secure group of buffer_size + spare
  // clients (SecureBuffers), and a version is one group's mean.
  std::optional<SecAggSettings> secagg;

  // InvalidArgument naming the first bad field.
  Status Validate() const;
};

class AsyncEngine final : public Engine, private VersionBuilder {
 public:
  static Result<std::unique_ptr<AsyncEngine>> Open(const AsyncOptions& options, const ModelState& initial_model,
                                                   Store* store, const Clock* clock, ModelEvaluator* evaluator,
                                                   ThreadPool* pool);

  Result<std::string> Join(const ClientRecord& client) override;
  Result<PollAnswer> Poll(const std::string& client_id) override;
  // NotFound: unknown client or task; PermissionDenied: another client's task;
  // FailedPrecondition: staler than max_staleness (counted in status().updates_stale), a base
  // version that is not the task's, or a finished federation; InvalidArgument: as the strategy's
  // Fold. A refused update changes nothing but ends its task; the client polls for a new one. An
  // update sent again after it was acknowledged (AcknowledgedTasks: the answer was lost, maybe
  // to a restart) returns OK and is ignored. Persist logs the update (Store::LogUpdate); a failed
  // log becomes the sticky error. Complete refuses (FailedPrecondition) an update whose Persist
  // ended after the federation's last version was published.
  Result<AdmittedUpdate> Admit(Update update) override;
  Status Persist(const AdmittedUpdate& admitted) const override;
  Status Complete(AdmittedUpdate admitted, Status persisted) override;
  Status CheckOpenTask(const std::string& client_id, const std::string& task_id) const override;
  bool Acknowledged(const std::string& client_id, const std::string& task_id) const override {
    return acknowledged_.Contains(client_id, task_id);
  }
  // The refused task ends (its place under max_concurrency is free; the client gets a new one
  // when it polls); in semi-async mode its group stops waiting for it, and a group left with
  // nobody to wait for is published at the next Tick, not at its latest time.
  Status Refused(const std::string& client_id, const std::string& task_id) override;
  Status Leave(const std::string& client_id) override;
  // Forgets tasks older than task_timeout_ms and, semi-asynchronously, publishes the groups whose
  // latest time has passed. Returns the sticky error, if any.
  Status Tick() override;

  // The last committed version (with commit_outside, newer ones may be queued for their commit).
  const ModelState& model() const override { return published_->model(); }
  std::shared_ptr<const ModelState> model_snapshot() const override { return published_->snapshot(); }
  uint32_t model_crc32c() const override { return published_->crc32c(); }
  bool finished() const override { return published_->version() >= static_cast<uint64_t>(options_.rounds); }
  EngineStatus status() const override;
  const std::vector<RoundRecord>& history() const override { return published_->history(); }
  std::string strategy_description() const override { return description_; }
  bool folds_coded() const override { return buffer_->folds_coded(); }
  uint64_t poll_epoch() const override { return poll_epoch_; }
  std::optional<PendingCommit> TakeCommit() override;
  // Internal when `commit` is not the next version; the run's error becomes the sticky error.
  Status FinishCommit(PendingCommit commit, Status committed) override;
  size_t commits_pending() const override { return commits_queued_.size() + commits_running_; }
  bool secure_aggregation() const override { return secure_ != nullptr; }
  Result<secagg::View> SecureAggregation(const std::string& client_id, const std::string& task_id,
                                         const secagg::Call& call) override;

 private:
  struct OpenTask {
    std::string client_id;
    uint64_t base_version = 0;
    int64_t issued_ms = 0;
    int64_t local_steps = 0;  // semi-asynchronous: chosen by the scheduler
  };

  AsyncEngine(const AsyncOptions& options, Store* store, const Clock* clock, ModelEvaluator* evaluator);
  // VersionBuilder, for the policy: Fold folds the update into the buffer with its staleness now
  // and notes it for the version's record, counting it accepted or refused (a refused one's log
  // entry is forgotten with the next commit).
  Status Fold(LoggedUpdate logged, uint64_t group) override;
  Status Publish() override;
  size_t folded() const override { return buffer_->size(); }
  // Logs an update that passed every check, before it is acknowledged; a failure is sticky.
  Result<LoggedUpdate> LogAccepted(Update update);
  // Open: hands the policy again what the log holds.
  Status RestoreLogged();
  // Open: numbers this opening of the store (opening_), for task ids unique across restarts.
  Status CountOpening();
  // With secure aggregation: a task from the client's group, or a wait.
  Result<PollAnswer> PollSecure(const std::string& client_id, int64_t now_ms);
  // With secure aggregation: the groups that ended go in as FedBuff buffers (a done group's mean
  // is logged, then folded and published as a version; an aborted group is counted).
  Status FoldEndedGroups();

  // Constant after construction.
  const AsyncOptions options_;
  Store* const store_;
  const Clock* const clock_;
  ModelEvaluator* const evaluator_;
  std::unique_ptr<FedBuffBuffer> buffer_;
  std::string description_;

  std::optional<PublishedVersions> published_;  // the committed versions; set by Open
  uint64_t head_version_ = 0;                   // newest aggregated version, committed or not
  // The model of head_version_ while its commit is queued or running (shared with the commit,
  // only read meanwhile); null once it is model_.
  std::shared_ptr<ModelState> head_model_;
  // The strategy's state as of head_version_ (SaveState after its Flush, or as restored): what a
  // refused aggregate goes back to, without saving the state again before every Flush.
  std::shared_ptr<const std::string> head_state_;
  int64_t versions_refused_nonfinite_ = 0;    // aggregates not published because not finite
  std::deque<PendingCommit> commits_queued_;  // commit_outside: not yet taken, oldest first
  size_t commits_running_ = 0;                // taken and not yet handed back
  ClientRegistry clients_;
  std::map<std::string, OpenTask> tasks_;              // task id -> task
  std::map<std::string, std::string> task_of_client_;  // client id -> task id
  uint64_t next_task_ = 0;
  uint64_t opening_ = 0;  // how many engines opened the store before this one
  AcknowledgedTasks acknowledged_;
  UpdateTally tally_;                      // of the updates folded into the buffer since the last version
  std::unique_ptr<ArrivalPolicy> policy_;  // FedBuff's or FedCompass's
  std::unique_ptr<SecureBuffers> secure_;  // with secure aggregation
  // The members whose updates are in the group mean being folded (Fold lists them in the record).
  std::vector<std::pair<std::string, std::string>> group_members_;
  std::vector<MergedUpdate> merged_;   // folded into the buffer since the last version
  uint64_t next_log_seq_ = 1;          // the next update's log entry
  std::vector<uint64_t> logged_done_;  // log entries the next commit forgets
  int64_t updates_accepted_ = 0;
  int64_t updates_refused_ = 0;
  uint64_t poll_epoch_ = 0;
  int64_t updates_stale_ = 0;
  Status sticky_error_;
};

}  // namespace plexus
