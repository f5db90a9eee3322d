// SyncEngine: synchronous federated rounds (FedAvg-style) as a single-threaded state machine
// driven by calls (Join, Poll, Submit, Tick) and an injected Clock. It never reads the wall
// clock, sockets or files itself, so the same engine runs under the gRPC server and in the
// simulator with virtual time.
//
// A round: once enough clients are available (K, or at least M after `selection_wait_ms`), the
// engine samples up to K of them with the seeded generator and hands each a task. Updates are
// checked and given to the aggregator as they arrive (Aggregator::FoldShared: the averaging
// family holds up to three and folds four per pass over its sum, with the bits of folding one at
// a time). The round closes when every selected client has
// reported (or as many as the backup-worker policy waits for), or at the deadline if at least M
// have (stragglers are dropped); with fewer than M at
// the deadline the attempt is abandoned and the round is retried with a fresh sample. Closing
// publishes version v+1, checkpoints it with the round record in one store transaction,
// then evaluates it. Every acknowledged update is in the store first, so a restarted engine
// continues the open round with them. A failed store write is sticky: every later call returns
// that error.
//
// Owns its aggregator; borrows store, clock, evaluator and pool, which must outlive it.
// Single-threaded: callers serialize access (server/rpc holds a mutex).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "aggregators/aggregator.h"
#include "aggregators/exact_sum.h"
#include "core/clock.h"
#include "core/model_state.h"
#include "core/status.h"
#include "core/task.h"
#include "core/thread_pool.h"
#include "core/update.h"
#include "server/coordinator/acknowledged_tasks.h"
#include "server/coordinator/backup_workers.h"
#include "server/coordinator/client_registry.h"
#include "server/coordinator/engine.h"
#include "server/coordinator/evaluator.h"
#include "server/coordinator/published_versions.h"
#include "server/coordinator/secure_round.h"
#include "server/coordinator/shared_engine_options.h"
#include "server/coordinator/update_tally.h"
#include "server/store/store.h"

namespace plexus {

// Sync rounds' options beside the shared ones (SharedEngineOptions: rounds, client timeout, poll retry,
// task hyperparameters).
struct SyncOptions : SharedEngineOptions {
  int64_t clients_per_round = 4;  // K: clients sampled per round
  int64_t min_clients = 2;        // M: fewest clients to start a round, and quorum to close it
  // The quorum at the deadline in updates, an edge's partial sum counting its clients' updates
  // (at a root under edge aggregators the quorum counts updates, not edges). 0: min_clients.
  int64_t min_updates = 0;
  int64_t round_deadline_ms = 300000;  // selected clients that have not reported by then are dropped
  int64_t selection_wait_ms = 2000;    // with M <= available < K, wait this long before sampling
  // Over-selection (Bonawitz et al. 2019): sample ceil(K x factor) clients and close the round
  // with the first K updates; the others' late updates are refused. 1 = no over-selection.
  double overselect = 1.0;
  // Backup workers: none | static:b=B | dynamic (DBW), see backup_workers.h. A round then closes
  // once the chosen number of updates is in (never fewer than min_clients); the rest are dropped.
  std::string backup_workers = "none";
  std::string strategy = "fedavg";  // aggregator spec, see aggregators/registry.h
  uint64_t seed = 0;                // client sampling
  // Secure aggregation (docs/privacy.md): each round's sampled clients form one SecureRound group
  // and the server learns only their weighted mean; each of its stages lasts at most the round
  // deadline. Needs a strategy of the averaging family, no over-selection or backup workers, and
  // at least 3 clients per round. Unset: updates arrive in the clear.
  std::optional<SecAggSettings> secagg;
  // Edge aggregator (plexus server --upstream, issue 41): this engine's rounds open only on a
  // version its parent handed out (AdoptParentVersion), numbered as the parent's, and a closed
  // round is not published: its exact partial sum waits for the upstream to send it
  // (partial()). Needs a strategy that keeps an exact sum (fedavg_exact); no secure aggregation.
  bool edge = false;
  // Edge mode with a strategy that keeps no exact sum (a robust rule): it runs over this edge's
  // clients only, and the edge sends its aggregate as one contribution weighted by their examples
  // ("edge-robust": a weaker guarantee than the rule over every client, docs/deployment.md).
  bool edge_robust = false;
  // Edge mode forwarding its clients' updates raw (--upstream-forward raw): a closed round's
  // partial also carries the updates themselves (EdgePartial::forwarded), which the upstream
  // sends as one bundle, so that a rule at the root runs over every client update of the tree.
  bool edge_forward_raw = false;

  // InvalidArgument naming the first bad field.
  Status Validate() const;
};

class SyncEngine final : public Engine {
 public:
  // Resumes from the store's latest checkpoint when there is one (its layout must match
  // `initial_model`); otherwise stores `initial_model` as version 0.
  static Result<std::unique_ptr<SyncEngine>> Open(const SyncOptions& options, const ModelState& initial_model,
                                                  Store* store, const Clock* clock, ModelEvaluator* evaluator,
                                                  ThreadPool* pool);

  Result<std::string> Join(const ClientRecord& client) override;
  Result<PollAnswer> Poll(const std::string& client_id) override;

  // Accepts one update. NotFound: unknown client or task; PermissionDenied: the task belongs to
  // another client; FailedPrecondition: stale base version or finished federation;
  // InvalidArgument: wrong layout, non-finite values or a bad example count. A refused update
  // changes nothing. A repeated submission of an accepted task returns OK and is ignored, also
  // after its round closed and the server restarted (AcknowledgedTasks, refilled from the last
  // rounds' records): a client whose acknowledgement a crash lost must hear that it is in.
  // Admit folds the update; Persist stores it in the open round (Store::PutAcceptedUpdate); a
  // failed store becomes the sticky error. Unavailable for a second upload of the task while the
  // first is being stored.
  Result<AdmittedUpdate> Admit(Update update) override;
  Status Persist(const AdmittedUpdate& admitted) const override;
  Status Complete(AdmittedUpdate admitted, Status persisted) override;
  Status CheckOpenTask(const std::string& client_id, const std::string& task_id) const override;
  bool Acknowledged(const std::string& client_id, const std::string& task_id) const override {
    return acknowledged_.Contains(client_id, task_id);
  }
  // The round stops waiting for the refused task (its client may still send a valid update for
  // it); a free client, sampled with the round's seed, gets a task in its place, else the round
  // closes once every task not refused is in and min_clients is met (at its deadline otherwise).
  Status Refused(const std::string& client_id, const std::string& task_id) override;
  Status Leave(const std::string& client_id) override;

  // Applies the round deadline. Call periodically (the server does, the simulator does at each
  // event). Returns the sticky error, if any.
  Status Tick() override;

  const ModelState& model() const override { return published_->model(); }
  std::shared_ptr<const ModelState> model_snapshot() const override { return published_->snapshot(); }
  uint32_t model_crc32c() const override { return published_->crc32c(); }
  bool finished() const override {
    return parent_finished_ || (!options_.edge && published_->version() >= static_cast<uint64_t>(options_.rounds));
  }
  EngineStatus status() const override;
  const std::vector<RoundRecord>& history() const override { return published_->history(); }
  std::string strategy_description() const override { return strategy_description_; }
  bool folds_coded() const override { return aggregator_->folds_coded(); }
  bool secure_aggregation() const override { return options_.secagg.has_value(); }
  // A member's call in its round's group; NotFound for a client or task not in the open round
  // (nor the round just closed, whose outcome members that finished early still ask about).
  // A round whose group finishes is published from its mean; one that aborts is abandoned and
  // retried with a fresh sample.
  Result<secagg::View> SecureAggregation(const std::string& client_id, const std::string& task_id,
                                         const secagg::Call& call) override;
  uint64_t poll_epoch() const override { return poll_epoch_; }

  // --- Edge mode (SyncOptions::edge) ---
  // What an edge's closed round sends its parent.
  struct EdgePartial {
    std::string parent_task;    // the parent's task it answers
    uint64_t round = 0;         // the parent's round
    uint64_t base_version = 0;  // the parent's version the clients trained from
    ExactSum sum;               // Σ w·δ over the round's updates, Σw, their count
    int64_t num_examples = 0;
    double mean_train_loss = 0;
    std::vector<MergedUpdate> merged;  // whose updates, which tasks
    // With SyncOptions::edge_forward_raw: the round's updates as acknowledged (read back from the
    // store), in arrival order.
    std::shared_ptr<const std::vector<Update>> forwarded;
  };
  // The parent handed out task `parent_task` on `model` (its version kept) for its round `round`:
  // the model becomes this engine's and a round opens on it once clients are there. The same task
  // again (handed out again, or after this edge restarted) changes nothing: the round open for
  // it, or its partial, stays. Another task (a newer version, or the same version again, as an
  // asynchronous parent hands out) drops a round still open or a partial for an earlier task (the
  // parent moved on without them, or has it) and opens a new round. FailedPrecondition outside
  // edge mode, or for a model of another layout, or a version 0 that differs from this edge's own
  // (the edge must start from the parent's --model and --seed). `local_steps` (0: the edge's own)
  // are the parent's task's: the edge's clients train as many, so that a semi-asynchronous parent's
  // assignment (FedCompass gives each task its steps) reaches them.
  Status AdoptParentVersion(std::shared_ptr<const ModelState> model, uint64_t round, const std::string& parent_task,
                            int64_t local_steps = 0);
  // The partial sum of the last round closed on the adopted version, once it has closed; null
  // before. Stays until another version is adopted (a lost upload is sent again).
  const EdgePartial* partial() const { return partial_ ? &*partial_ : nullptr; }
  // The parent finished: so does this engine (its clients are told at their next poll).
  void FinishWithParent();

 private:
  struct OpenRound {
    uint64_t round = 0;
    int64_t attempt = 0;
    int64_t deadline_ms = 0;
    std::map<std::string, std::string> task_of_client;  // client id -> task id
    std::map<std::string, std::string> client_of_task;  // task id -> client id
    std::set<std::string> submitted;                    // client ids
    std::set<std::string> refused;                      // client ids whose update the door refused (Refused)
    std::set<std::string> persisting;                   // client ids whose folded update is being stored
    // A bundle of forwarded updates (UpdateBundle) was refused after some of its updates were
    // folded: the aggregator cannot take them back, so the attempt is abandoned (and the round
    // retried) once nothing is being stored.
    bool tainted = false;
    std::vector<MergedUpdate> merged;              // the submitted updates, in arrival order
    int64_t updates = 0;                           // client updates in them (a partial sum: its count)
    std::map<std::string, int64_t> handed_out_ms;  // when each task first went to its client
    size_t wait_for = 0;                           // updates that close the round
    double update_sq_norms = 0.0;                  // dynamic backup workers: sum of |delta|^2
    UpdateTally tally;                             // of the submitted updates
    std::shared_ptr<SecureRound> secure;           // with secure aggregation: the round's group

    // Samples `client` into this attempt: task id "r<round>a<attempt>-<client>".
    void AddTask(const std::string& client) {
      const std::string task_id = "r" + std::to_string(round) + "a" + std::to_string(attempt) + "-" + client;
      task_of_client[client] = task_id;
      client_of_task[task_id] = client;
    }
    // What the store keeps of it (Store::PutOpenRound).
    OpenRoundRecord Record() const { return {round, attempt, {task_of_client.begin(), task_of_client.end()}}; }
  };

  SyncEngine(const SyncOptions& options, Store* store, const Clock* clock, ModelEvaluator* evaluator);
  // Continues the round a previous process had open, with the updates it had acknowledged.
  Status RestoreOpenRound();
  void MaybeStartRound();
  Status CloseRound();
  // Folds `update` into the aggregator, or each update of a bundle of forwarded ones
  // (UpdateBundle) under its path; coded values decoded for a strategy that folds none. `folded`
  // counts the bundle's updates folded before an error (which the aggregator keeps).
  // A plain update (not a bundle, no codes the strategy cannot fold) is given up to the strategy
  // (Aggregator::FoldShared), which may hold it: read-only from then on.
  Status FoldClientUpdates(const std::shared_ptr<Update>& update, size_t* folded = nullptr);
  // Whether the open round has every update it waits for (see Refused).
  bool RoundComplete() const;
  // Dynamic backup workers: what the closing round (model_ -> next) says about durations and noise.
  void LearnFromRound(const ModelState& next);
  void AbandonRound();
  // With secure aggregation: publishes the open round once its group is done, abandons it once
  // the group aborted.
  Status AfterSecureStage();
  Task TaskFor(const std::string& client_id) const;
  // Whether the open round's updates make the quorum (min_updates, or min_clients).
  bool Quorate() const;
  // How many updates close the round with these selected clients.
  size_t WaitFor(const std::map<std::string, std::string>& selected) const;

  // Constant after construction.
  const SyncOptions options_;
  Store* const store_;
  const Clock* const clock_;
  ModelEvaluator* const evaluator_;
  std::unique_ptr<Aggregator> aggregator_;
  // The aggregator's state as of the newest committed version (SaveState at its commit, or as
  // restored): what a refused aggregate goes back to, without saving the state again before
  // every Finalize (a server optimizer's moments are 8 or 16 bytes per parameter).
  std::string head_state_;
  std::string strategy_description_;
  ThreadPool* pool_ = nullptr;

  std::optional<PublishedVersions> published_;  // set by Open
  ClientRegistry clients_;
  std::optional<BackupWorkers> backups_;
  std::optional<OpenRound> open_;
  AcknowledgedTasks acknowledged_;
  int64_t attempts_ = 0;       // abandoned attempts of the current round
  int64_t idle_since_ms_ = 0;  // when the engine last became ready for a new round
  int64_t updates_accepted_ = 0;
  int64_t updates_refused_ = 0;
  int64_t rounds_refused_nonfinite_ = 0;  // attempts abandoned because their aggregate was not finite
  uint64_t poll_epoch_ = 0;
  // The last closed or abandoned secure round, for members that ask how it ended.
  std::shared_ptr<SecureRound> last_secure_;
  std::map<std::string, std::string> last_secure_tasks_;  // task id -> client id
  int64_t secure_rounds_aborted_ = 0;
  std::string last_secure_abort_;
  Status sticky_error_;
  // Edge mode: the parent's round the adopted version is for (until its round closes), the
  // closed round's partial, and whether the parent has finished.
  std::optional<uint64_t> parent_round_;
  std::string parent_task_;         // the parent's task the open or next round answers (empty: unknown after a restart)
  int64_t parent_local_steps_ = 0;  // the local steps of the parent's task (0: options_.task's)
  std::optional<EdgePartial> partial_;
  bool parent_finished_ = false;
};

}  // namespace plexus
