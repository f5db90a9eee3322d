// ClientRuntime: the client's main loop. Joins, long-polls for tasks, downloads the model of a
// task's version (cached by version, resumed by offset after a dropped stream, verified by its
// SHA-256), trains it through the Trainer, and uploads the delta. Transient failures
// (Unavailable, DeadlineExceeded) are retried with exponential backoff and jitter, so the client
// rides out a server restart; it rejoins when the server no longer knows it, and returns when the
// federation finishes. What to do next is the ClientSession's decision (client/client_session.h,
// shared with the simulator's virtual clients); this runtime carries its steps out over the
// transport, the trainer and the state directory. Borrows the transport and data, which must
// outlive it; owns its trainer. Single-threaded.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "client/client_session.h"
#include "client/client_state_dir.h"
#include "client/federation_transport.h"
#include "compute/dataset.h"
#include "compute/trainer.h"
#include "core/clock.h"
#include "core/model_state.h"
#include "core/status.h"
#include "privacy/gaussian_noise.h"

namespace plexus {

// How a client running local DP (ClientOptions::local_dp_clip and local_dp_noise) announces it at
// join: "clip=C,noise=Z", each to 17 significant digits. A server running the same local DP
// expects exactly this text.
std::string LocalDpAnnouncement(double clip, double noise);

// An update made otherwise than by training: what an edge aggregator (plexus server --upstream)
// sends its parent for a task, the partial sum of its own clients' updates.
struct Contribution {
  std::string codec;  // the payload's codec spec (compression/codec.h)
  std::shared_ptr<const std::string> payload;
  int64_t num_examples = 0;
  std::map<std::string, double> metrics;
};

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
  // Local differential privacy: each update is clipped to this L2 norm and gets Gaussian noise of
  // standard deviation local_dp_noise × local_dp_clip (OpenSSL's generator) before it is encoded,
  // kept or sent. 0: off.
  double local_dp_clip = 0;
  double local_dp_noise = 0;
  // Keeps a copy of every update this client makes, as float32 safetensors of its delta named
  // TASK.n<EXAMPLES>.safetensors, in this directory: what the client contributed, for its own
  // audit (with secure aggregation, what only the device ever sees in the clear). Empty: none.
  std::string save_updates_dir;
  // Fault injection, for tests of secure aggregation: on reaching this stage of a group ("advertise
  // keys", "share keys", "masked input", "unmask"), the client stops without sending its message
  // there, as a device that died at that point would (Run returns Aborted). Empty: never.
  std::string quit_at_secure_stage;
  // Instead of training: each task's update is what this returns for the task and its model,
  // which it may block for (an edge aggregator's partial sum, once its own round has closed);
  // errors are taken as a training failure's. The client then makes no trainer. Unset: it trains.
  std::function<Result<Contribution>(const Task& task, const ModelState& model)> contribute;
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

  // With local DP: the noised updates made so far (each a release of this client's data to the
  // server; sending the same bytes again is not another one).
  int64_t local_dp_releases() const { return local_dp_releases_; }

 private:
  Result<ClientSummary> RunUntilStopped();
  bool Stopping() const { return stop_ && stop_->load(); }
  static Status Stopped() { return CancelledError("stopped"); }
  int64_t NowMs() const { return (options_.clock ? options_.clock : &real_clock_)->NowMs(); }
  // Logs what the session says with a step.
  static void Say(const ClientStep& step);

  // Each carries out one step of the session and returns the session's next one.
  ClientStep Join();
  ClientStep Poll();
  // Fetches the task's model and trains it; its update becomes pending_upload_ (with secure
  // aggregation: takes part in the task's group instead, TrainSecurely).
  ClientStep Train(const Task& task);
  // The task's update from options_.contribute instead of the trainer.
  ClientStep Contribute(const Task& task);
  struct TrainedDelta {
    ModelState delta;      // trained minus the task's model (clipped and noised with local DP)
    TrainOutcome outcome;  // its weights moved into delta
  };
  // Fetches the task's model and trains it. Errors as ClientSession::TaskFailed takes them
  // (Aborted: training diverged).
  Result<TrainedDelta> TrainDelta(const Task& task);
  // Writes the delta to options_.save_updates_dir, if set (a failure is logged, not fatal).
  void SaveUpdateCopy(const Task& task, const TrainedDelta& trained);
  // The task as a member of its secure aggregation group (client/secure_task.cpp), the member's
  // decisions taken by SecureMemberSession: advertise keys, share them, train, send the masked
  // update, reveal the shares asked for.
  ClientStep TrainSecurely(const Task& task);
  // One call to the task's group, retried with backoff after transient failures.
  Result<secagg::View> CallGroup(const Task& task, const secagg::Call& call);
  // Sends pending_upload_ (`resume`: the server may hold its first part); drops it, and its kept
  // copy, once the server has answered.
  ClientStep Upload(bool resume);
  // Evaluates the task's model on the held-out data; the result becomes pending_report_.
  ClientStep Evaluate(const Task& task);
  ClientStep Report();
  // After the first join: an update an earlier run trained and did not see acknowledged becomes
  // pending_upload_ (true), unless it was trained as another client (dropped).
  bool TakeKeptUpdate();

  // The task's model, shared with cached_model_ (kept for the next task of the same version):
  // handed out without a copy.
  Result<std::shared_ptr<const ModelState>> FetchModel(const Task& task);
  // The task's model through its download_codec; FailedPrecondition when the transport has no
  // coded downloads (the caller then downloads float32).
  // `sha256` receives the rebuilt model's SHA-256 (checked against the server's).
  Result<ModelState> FetchCodedModel(const Task& task, std::string* sha256);
  // Calls `attempt` (one download call into its sink) until it succeeds, backing off after
  // transient failures; after a DataLoss (an inconsistent stream) it calls `start_over`, which
  // empties the sink, and downloads from byte 0.
  Status DownloadUntilDone(const std::function<void()>& start_over, const std::function<Status()>& attempt);
  // The model of `version` kept in the state directory (complete, or a partial file that holds
  // all of it), if it matches `sha256`.
  std::optional<ModelState> KeptModel(uint64_t version, const std::string& sha256);
  // The update's bytes in the task's upload codec (setting *codec_used to it), or as float32
  // safetensors (clearing it) when the task names none or one this client cannot make: then the
  // delta's own values, not a copy (Payload::SafetensorsOf).
  std::shared_ptr<const Payload> EncodeUpdate(const Task& task, ModelState delta, std::string* codec_used);
  // Sleeps for the session's next backoff step; Unavailable once failures have lasted
  // give_up_after_ms.
  Status BackOff(const Status& cause);
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
  ClientSession session_;
  bool joined_once_ = false;
  bool secure_aggregation_ = false;  // the server said so at join
  struct PendingUpdate {
    UploadHeader header;
    std::shared_ptr<const Payload> payload;
  };
  std::optional<PendingUpdate> pending_upload_;
  struct PendingReport {
    Task task;
    Evaluation evaluation;
  };
  std::optional<PendingReport> pending_report_;
  std::shared_ptr<const ModelState> cached_model_;
  std::string cached_sha256_;           // cached_model_'s SHA-256, checked when it was downloaded
  std::optional<ModelState> residual_;  // the codec's error feedback (top-k), across tasks
  OptimizerState optimizer_state_;      // AdamW's moments, across tasks (and restarts, with a state dir)
  RealClock real_clock_;
  std::unique_ptr<GaussianNoise> local_dp_noise_;  // with local DP: OpenSSL's generator
  int64_t local_dp_releases_ = 0;
};

}  // namespace plexus
