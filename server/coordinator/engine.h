// Engine: what the server and the simulator drive, whatever the federation mode. Engines are
// single-threaded state machines fed by calls and an injected Clock (see SyncEngine and
// AsyncEngine); callers serialize access.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/model_state.h"
#include "core/status.h"
#include "core/task.h"
#include "core/update.h"
#include "privacy/secagg_exchange.h"
#include "server/coordinator/client_schedule.h"
#include "server/coordinator/evaluator.h"
#include "server/store/store.h"

namespace plexus {

struct EngineStatus {
  std::string mode;
  uint64_t round = 0;  // round in progress (or last round when finished)
  uint64_t model_version = 0;
  int64_t known_clients = 0;
  int64_t connected_clients = 0;  // heard from within the client timeout
  int64_t round_selected = 0;     // clients holding a task now
  int64_t round_received = 0;     // updates waiting to be aggregated
  int64_t updates_accepted = 0;   // since this process started
  int64_t updates_refused = 0;
  int64_t updates_stale = 0;         // refused for exceeding the staleness bound (async)
  int64_t aggregates_nonfinite = 0;  // aggregates not published because not finite (since start)
  std::optional<double> last_accuracy;
  // The newest federated evaluation's accuracy and version (filled by the server's door).
  std::optional<double> last_federated_accuracy;
  uint64_t federated_version = 0;
  std::vector<ClientSchedule> schedule;  // semiasync: every client's speed estimate, steps and group
  bool finished = false;
  // Secure aggregation: the open round's stage, rounds whose group aborted (since start) and why
  // the last one did.
  std::string secure_stage;
  int64_t secure_rounds_aborted = 0;
  std::string last_secure_abort;
  double last_secure_unmask_ms = 0;  // the newest group's unmasking, real milliseconds
  std::string error;                 // sticky store error, empty when healthy
};

// A version an engine has aggregated but not yet committed, handed to its caller so that the
// hash and the checkpoint's write (most of a publication's time) run outside the lock that
// serializes the engine (see AsyncOptions::commit_outside). Run() reads the model and touches
// nothing of the engine; the engine neither reads nor changes the model until it is handed back.
struct PendingCommit {
  RoundRecord record;  // model_sha256 is filled in by Run()
  std::shared_ptr<ModelState> model;
  // Aggregator::SaveState() at this version, shared with the engine, which restores it should the
  // next aggregate be refused (a server optimizer's moments: copied once, not twice); null: none.
  std::shared_ptr<const std::string> aggregator_state;
  uint32_t model_crc32c = 0;  // filled in by Run(), in the same pass as the hash

  // Hashes the model into the record, then commits record and checkpoint (CommitWithDigests, on
  // this thread alone).
  Status Run(Store* store);
};

// Commits `record` and `model` (Store::CommitRound) with the model's digests filled in: its
// ContentSha256 into record->model_sha256, its ContentCrc32c into *crc32c. With
// `write_while_hashing`, for a model of kPrepareWhileHashingBytes or more, another thread writes
// its checkpoint (Store::PrepareCheckpoint) while this one hashes it, so that a commit takes the
// longer of the two instead of both: for a sync round's close, while every client waits and a
// core would idle (a 4 MB model's hash took 2.7 ms here and its file 1.2 ms). Asynchronous
// commits run beside uploads and hash, then write (PendingCommit::Run).
inline constexpr size_t kPrepareWhileHashingBytes = size_t{1} << 20;
Status CommitWithDigests(Store* store, RoundRecord* record, const ModelState& model, std::string_view aggregator_state,
                         uint32_t* crc32c, bool write_while_hashing = true);

// An update an engine has checked and given a place (Engine::Admit), on its way to the store.
struct AdmittedUpdate {
  Update update;  // empty when `shared` holds it
  // Sent again because its answer was lost: nothing to store, Complete acknowledges it again.
  bool already_acknowledged = false;
  uint64_t log_seq = 0;  // asynchronous modes: its entry in the update log (Store::LogUpdate)
  uint64_t round = 0;    // sync rounds: the round and attempt it belongs to (Store::PutAcceptedUpdate)
  int64_t attempt = 0;
  // Sync rounds: the update given to the strategy (Aggregator::FoldShared), which may hold it to
  // fold it later together with others; read-only from here on.
  std::shared_ptr<const Update> shared{};

  const Update& get() const { return shared ? *shared : update; }
};

class Engine {
 public:
  virtual ~Engine() = default;

  // Registers a client (or refreshes a known one) and returns its id: `client.id` when given,
  // otherwise a new "client-N".
  virtual Result<std::string> Join(const ClientRecord& client) = 0;
  // NotFound for an unknown client.
  virtual Result<PollAnswer> Poll(const std::string& client_id) = 0;
  // Accepts one update; a refused update changes nothing else (codes in each engine's header).
  // Takes the update: callers that are done with it move it in, so it is not copied.
  // Admit, Persist and Complete in one call.
  Status Submit(Update update);
  // Submit in three steps, so that a server makes updates durable outside the lock that
  // serializes the engine and uploads that finish together share one disk sync (the store's group
  // commit). Admit checks the update and gives it a place (refusals as Submit's); Persist writes
  // it to the store and is the one call that may run without the caller's lock, concurrently with
  // any other call (it reads only `admitted` and the thread-safe store); Complete, under the lock
  // again, takes it into its round or buffer once Persist succeeded (OK: acknowledge it), or
  // answers why not. Every admitted update must be completed: until then a sync round does not
  // close and its place stays taken.
  virtual Result<AdmittedUpdate> Admit(Update update) = 0;
  virtual Status Persist(const AdmittedUpdate& admitted) const = 0;
  virtual Status Complete(AdmittedUpdate admitted, Status persisted) = 0;
  // OK when `task_id` is an open task of `client_id`, a client the engine knows, or one whose
  // update the engine acknowledged (sent again because the answer was lost): what the server
  // checks before it receives (and may keep part of) an upload, so that only joined clients'
  // uploads for their own tasks take its memory. NotFound for an unknown client or task,
  // PermissionDenied for another client's task, FailedPrecondition once finished. Changes nothing.
  virtual Status CheckOpenTask(const std::string& client_id, const std::string& task_id) const = 0;
  // True when the engine acknowledged `client_id`'s update of `task_id` already: Submit
  // acknowledges it again without merging it, so the server checks it against nothing that has
  // moved since (a norm bound). Changes nothing.
  virtual bool Acknowledged(const std::string& client_id, const std::string& task_id) const = 0;
  // The server refused `client_id`'s update of its open task `task_id` for what it holds (a norm
  // bound, values out of range): the client will not train that task again, so the engine stops
  // waiting for it (a valid update of it is still taken). Sync rounds sample another free client in its place, or close
  // with what they have once every other task is in and min_clients is met. Unknown tasks change nothing.
  virtual Status Refused(const std::string& client_id, const std::string& task_id) {
    (void)client_id;
    (void)task_id;
    return Status::Ok();
  }
  // `client_id` is gone for good (revoked at the door): its open task is released as Refused
  // releases it (a sync round samples another client in its place) and it no longer counts as
  // connected. Unknown clients change nothing; calling it again changes nothing more.
  virtual Status Leave(const std::string& client_id) {
    (void)client_id;
    return Status::Ok();
  }
  // Secure aggregation: whether this engine's rounds are secure aggregation groups (then Submit
  // refuses updates in the clear), and a member's call about its task's group (SecureRound).
  // Engines that do not run it refuse every call (FailedPrecondition).
  virtual bool secure_aggregation() const { return false; }
  virtual Result<secagg::View> SecureAggregation(const std::string& client_id, const std::string& task_id,
                                                 const secagg::Call& call) {
    (void)client_id;
    (void)task_id;
    (void)call;
    return FailedPreconditionError("this server does not run secure aggregation (plexus server --secagg)");
  }
  // Whether Submit takes updates that carry coded values (Update::coded): true when the merge
  // strategy folds them (the averaging family). Otherwise the caller decodes them first.
  virtual bool folds_coded() const { return false; }
  // Applies deadlines. Returns the sticky error, if any.
  virtual Status Tick() = 0;

  virtual const ModelState& model() const = 0;
  // The same model as a snapshot the caller may keep and read without the engine's lock (the
  // server encodes downloads from it): engines never change a published model in place.
  virtual std::shared_ptr<const ModelState> model_snapshot() const = 0;
  // model()'s ContentCrc32c, computed once with its hash when it was published: what a task for
  // this version names for the client's download check.
  virtual uint32_t model_crc32c() const = 0;
  virtual bool finished() const = 0;
  virtual EngineStatus status() const = 0;
  // Published versions so far, oldest first (including those before a restart).
  virtual const std::vector<RoundRecord>& history() const = 0;
  virtual std::string strategy_description() const = 0;
  // Moves whenever a Poll may answer differently than before (a round opened or closed, a
  // version was published, a task slot freed), so a caller that holds idle clients back instead
  // of letting them poll on a timer (the simulator) knows when to let them poll again.
  virtual uint64_t poll_epoch() const = 0;

  // Engines that leave commits to their caller queue them here, oldest first; the others never
  // do. The caller takes one (nullopt when none is queued), runs it without the engine's lock,
  // and hands it back with Run()'s result, one at a time and in order. The version is served
  // only once handed back committed; a failed commit becomes the engine's sticky error.
  virtual std::optional<PendingCommit> TakeCommit() { return std::nullopt; }
  virtual Status FinishCommit(PendingCommit commit, Status committed);
  // Queued and running commits: a caller bounds the memory they hold by waiting while too many are
  // (kMaxPendingCommits).
  virtual size_t commits_pending() const { return 0; }
};

// Versions aggregated but not yet committed, each a model held in memory, at which a caller of
// an engine that leaves commits to it holds new updates back until one is committed. Without the
// bound, a committer that falls behind (it shares the CPU with every upload) lets the queue grow
// by a model per version: the ingest benchmark's unlogged run reached 90 queued versions in 1000
// updates, and the fresh memory they took cost a quarter of its CPU.
inline constexpr size_t kMaxPendingCommits = 2;

}  // namespace plexus

namespace plexus {

// What an engine restores from the store when it opens: the latest checkpoint (or `initial`,
// stored as version 0 when the store is empty), the known client ids and the history.
struct RestoredState {
  ModelState model;
  std::vector<std::string> client_ids;
  std::vector<RoundRecord> history;
  std::string aggregator_state;  // committed with the newest round (Aggregator::SaveState)
};

// FailedPrecondition when the store holds a model of another layout.
Result<RestoredState> RestoreEngineState(Store* store, const ModelState& initial);

// Evaluates a just-committed version (when there is an evaluator) and records the result in the
// store and in `record`. An evaluation that fails is skipped; a store error is returned.
Status EvaluatePublished(ModelEvaluator* evaluator, Store* store, const ModelState& model, RoundRecord* record);

// Refuses (InvalidArgument, naming the field) an update whose reported numbers cannot be stored or
// summed: a non-finite metric (a client whose loss diverged reports NaN), a negative or absurdly
// large example count or step count. Engines call it before anything of the update is kept, so
// no such number ever reaches a round record.
Status CheckReportedNumbers(const Update& update);

// Evaluates the committed versions after the newest evaluated one (a server killed between a
// commit and its evaluation left them without one; its summary would report the previous
// version's accuracy), records the results in the store and in `history`. No-op without an
// evaluator; a version whose checkpoint cannot be read or whose evaluation fails is skipped.
Status EvaluateUnevaluated(ModelEvaluator* evaluator, Store* store, std::vector<RoundRecord>* history);

// The accuracy of the newest evaluated version in `history`, if any.
std::optional<double> LastAccuracy(const std::vector<RoundRecord>& history);

}  // namespace plexus
