// ClientRuntime: the client's main loop. Joins, long-polls for tasks, downloads the model of a
// task's version (cached by version, resumed by offset after a dropped stream, verified by its
// SHA-256), trains it through the Trainer, and uploads the delta. Transient failures
// (Unavailable, DeadlineExceeded) are retried with exponential backoff and jitter, so the client
// rides out a server restart; it rejoins when the server no longer knows it, and returns when the
// federation finishes. Borrows the transport and data, which must outlive it; owns its trainer.
// Single-threaded.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "client/client_state_dir.h"
#include "client/federation_transport.h"
#include "compute/dataset.h"
#include "compute/trainer.h"
#include "core/clock.h"
#include "core/model_state.h"
#include "core/rng.h"
#include "core/status.h"

namespace plexus {

struct ClientOptions {
  std::string client_id;  // empty: the server assigns one
  std::string device = "cpu";
  int64_t poll_wait_ms = 10000;  // long-poll window
  int64_t backoff_initial_ms = 200;
  int64_t backoff_max_ms = 5000;
  int64_t give_up_after_ms = 300000;  // longest stretch of failures before Run() gives up, from
                                      // the first failure seen: failing calls' time counts too
  uint64_t seed = 0;                  // batch order and backoff jitter
  double slowdown = 1.0;              // >= 1: sleep so that each task takes this many times as long
                                      // as training did (reproduces slow devices)
  // Test-only: replaces sleeping (default: std::this_thread::sleep_for) and the clock that
  // times a stretch of failures (default: real time; not owned).
  std::function<void(int64_t ms)> sleep;
  const Clock* clock = nullptr;
  // Device policy (edge/device_policy.h): why the device may not train now, or empty. While it
  // says no, the client takes no new task and pauses a running one at its next step, checking
  // again every device_check_ms; the paused task resumes where it stopped.
  std::function<std::string()> device_blocked;
  int64_t device_check_ms = 5000;
  // Where the client keeps its identity, its model and an update not yet acknowledged, so that
  // after a restart it resumes a download or an upload from the bytes it had (and the server
  // kept) instead of starting over. Null: memory only. Not owned.
  ClientStateDir* state = nullptr;
  // Held-out examples for the server's evaluation tasks (federated evaluation); empty: the client
  // answers them with zero examples. Borrowed like the training data.
  DatasetView eval_data;
};

struct ClientSummary {
  std::string client_id;
  int64_t tasks_completed = 0;
  int64_t tasks_refused = 0;  // uploads the server refused (e.g. the round had closed)
  int64_t tasks_failed = 0;   // tasks whose local training diverged (nothing uploaded)
  int64_t downloads = 0;
  int64_t evaluations = 0;                    // evaluation tasks answered
  int64_t pauses = 0;                         // times a running task paused for the device policy
  int64_t uploads_resumed_after_restart = 0;  // updates trained by an earlier run, sent by this one
};

// Builds the trainer for the model the server announces at join.
using TrainerFactory = std::function<Result<std::unique_ptr<Trainer>>(const std::string& model_name)>;

class ClientRuntime {
 public:
  ClientRuntime(ClientOptions options, FederationTransport* transport, TrainerFactory make_trainer, DatasetView data);

  // Runs until the federation finishes (OK), `stop` becomes true (Cancelled), or an error that
  // retrying cannot fix. Once `stop` is set, waits and backoffs end within 50 ms and no new step
  // starts; a call in progress ends when the transport cancels it (FederationTransport::Shutdown,
  // which whoever sets `stop` calls) and training in progress finishes first.
  Result<ClientSummary> Run(const std::atomic<bool>* stop = nullptr);

 private:
  Result<ClientSummary> RunUntilStopped();
  bool Stopping() const { return stop_ && stop_->load(); }
  static Status Stopped() { return CancelledError("stopped"); }
  Status Join();
  // Trains, uploads and returns what the server answered for the next task along with the
  // upload (nullopt: poll for it).
  Result<std::optional<PollAnswer>> RunTask(const Task& task);
  Result<ModelState> FetchModel(const Task& task);
  // The task's model through its download_codec; FailedPrecondition when the transport has no
  // coded downloads (the caller then downloads float32).
  // `sha256` receives the rebuilt model's SHA-256 (checked against the server's).
  Result<ModelState> FetchCodedModel(const Task& task, std::string* sha256);
  // Calls `attempt` (one download call appending to *bytes) until it succeeds, backing off after
  // transient failures; a DataLoss (an inconsistent stream) empties *bytes to start over.
  Status DownloadUntilDone(std::string* bytes, const std::function<Status()>& attempt);
  // Evaluates the task's model on the held-out data and reports it (nullopt: poll next).
  Result<std::optional<PollAnswer>> RunEvaluation(const Task& task);
  // The model of `version` kept in the state directory (complete, or a partial file that holds
  // all of it), if it matches `sha256`.
  std::optional<ModelState> KeptModel(uint64_t version, const std::string& sha256);
  // Uploads an update until the server acknowledges it (its answer for the next task, nullopt:
  // poll) or refuses it (nullopt); drops the kept copy either way. Retries what is transient.
  Result<std::optional<PollAnswer>> Deliver(UploadHeader header, std::shared_ptr<const std::string> payload);
  // The update's bytes in the task's upload codec (setting *codec_used to it), or as float32
  // safetensors (clearing it) when the task names none or one this client cannot make.
  std::shared_ptr<const std::string> EncodeUpdate(const Task& task, const ModelState& delta, std::string* codec_used);
  // Delivers an update an earlier run trained and did not see acknowledged.
  Result<std::optional<PollAnswer>> DeliverKeptUpdate();
  // Sleeps for the next backoff step; Unavailable once failures have lasted give_up_after_ms.
  Status BackOff(const Status& cause);
  void ResetBackoff() {
    failures_ = 0;
    failing_since_ms_ = -1;
  }
  void Sleep(int64_t ms);
  // Waits while the device policy says no (logging why once); Cancelled when stopped meanwhile.
  // True when it waited.
  Result<bool> WaitForDevice(const char* what);

  const std::atomic<bool>* stop_ = nullptr;  // set by Run
  const ClientOptions options_;
  FederationTransport* const transport_;
  const TrainerFactory make_trainer_;
  std::unique_ptr<Trainer> trainer_;
  std::string model_name_;
  const DatasetView data_;
  Rng rng_;
  std::string client_id_;
  std::optional<ModelState> cached_model_;
  std::string cached_sha256_;           // cached_model_'s SHA-256, checked when it was downloaded
  std::optional<ModelState> residual_;  // the codec's error feedback (top-k), across tasks
  // Tasks whose update the server refused: training one again would send the same bytes to the
  // same refusal (a sync round hands the client its open task until the round's deadline), so the
  // client waits for other work instead.
  std::set<std::string> refused_tasks_;
  // Refusals of consecutive updates for the same reason (RefusalReason): from the second on, the
  // client says why in one line and waits longer before its next task, doubling each time.
  std::string last_refusal_reason_;
  int refusals_in_a_row_ = 0;
  int failures_ = 0;
  int64_t failing_since_ms_ = -1;  // when the first of the current failures was seen; -1: none
  RealClock real_clock_;
  ClientSummary summary_;
};

}  // namespace plexus
