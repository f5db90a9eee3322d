// ClientSession: what a federated client does next, as a pure state machine. It is the one copy
// of the client's decisions (retries and their backoff, rejoining a server that forgot the
// client, waiting, skipping a task whose update was refused, backing off after refusals for the
// same reason, skipping a task whose model cannot be had, the summary's counts), driven by
// whoever does the work: ClientRuntime over a FederationTransport (`plexus client`) and the
// simulator's virtual clients (simulations/sim_runner.cpp) over the engine in virtual time.
//
// Each event (an answer, a failure) returns the next ClientStep: what to do, after how long.
// The session does no I/O, sleeps never and logs nothing (a step carries what to say, for a
// driver that logs); time comes in with each event that may start a backoff, so a test or the
// simulator drives it on any clock. Value type; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "client/federation_transport.h"
#include "core/status.h"
#include "core/task.h"

namespace plexus {

struct ClientSessionOptions {
  int64_t backoff_initial_ms = 200;
  int64_t backoff_max_ms = 5000;
  int64_t give_up_after_ms = 300000;  // longest stretch of failures before the session gives up,
                                      // from the first failure seen: failing calls' time counts too
  uint64_t seed = 0;                  // backoff jitter
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

struct ClientStep {
  enum class Kind {
    kJoin,      // join (again): the server does not know this client (yet)
    kPoll,      // ask for work
    kTrain,     // fetch the task's model, train it and upload the update (then Trained/UploadAnswered)
    kEvaluate,  // fetch the task's model, evaluate it and report (then EvaluationReported)
    kUpload,    // send the update again (`resume`: the server may hold its first part)
    kReport,    // report the evaluation again
    kDone,      // the federation finished
    kFail,      // stop with `error`: retrying cannot fix it
  };
  // Why a step waits first; a driver with long polls (the simulator) parks a client told to wait
  // by the server until the server's state moves, instead of polling on a timer.
  enum class Pause { kNone, kServerSaidWait, kRefusedTask, kRefusals, kBackoff };
  enum class Say { kNothing, kDebug, kInfo, kWarning, kError };

  Kind kind = Kind::kPoll;
  int64_t after_ms = 0;  // wait this long before the step
  Pause pause = Pause::kNone;
  Task task;            // kTrain, kEvaluate
  bool resume = false;  // kUpload
  Status error;         // kFail
  Say say = Say::kNothing;
  std::string message;  // what a logging driver says at `say`

  static ClientStep Of(Kind kind) {
    ClientStep step;
    step.kind = kind;
    return step;
  }
  static ClientStep Failed(Status error) {
    ClientStep step = Of(Kind::kFail);
    step.error = std::move(error);
    return step;
  }
};

class ClientSession {
 public:
  // `client_id`: the id to join as (empty: the server assigns one).
  explicit ClientSession(ClientSessionOptions options, std::string client_id = "");

  const std::string& client_id() const { return summary_.client_id; }
  const ClientSummary& summary() const { return summary_; }
  // Nothing remembered that changes a later step: no failures under way, no refused task, no
  // refusal streak. A session at rest decides like a new one with the same options and client
  // id (the summary's counts aside), so a driver with many idle clients may drop it.
  bool at_rest() const { return failures_ == 0 && refused_tasks_.empty() && refusals_in_a_row_ == 0; }

  // The first step: join.
  ClientStep Start() const;
  ClientStep JoinAnswered(const Result<JoinReply>& reply, int64_t now_ms);
  // After joining, when the driver holds an update an earlier run trained and did not see
  // acknowledged (trained as this client): send it, resuming what the server may hold.
  ClientStep ResumeKeptUpload();
  ClientStep PollAnswered(const Result<PollAnswer>& answer, int64_t now_ms);
  // A task could not be trained or evaluated: its model is gone or does not match (DataLoss,
  // NotFound: skip it), local training diverged (Aborted: count it failed, skip it); any other
  // error stops the client.
  ClientStep TaskFailed(const Task& task, const Status& why);
  // The task's update was made: send it.
  static ClientStep Trained() { return ClientStep::Of(ClientStep::Kind::kUpload); }
  ClientStep UploadAnswered(const std::string& task_id, const Result<UploadAck>& ack, int64_t now_ms);
  ClientStep EvaluationReported(const std::string& task_id, const Status& reported, int64_t now_ms);

  // For a driver's own retry loop inside a step (a download resumed by offset): how long to wait
  // before trying again after the transient failure `cause`, or Unavailable once failures have
  // lasted give_up_after_ms. Succeeded ends the stretch of failures.
  Result<int64_t> RetryDelay(const Status& cause, int64_t now_ms);
  void Succeeded() {
    failures_ = 0;
    failing_since_ms_ = -1;
  }
  void CountDownload() { ++summary_.downloads; }
  void CountPause() { ++summary_.pauses; }

  // Unavailable, DeadlineExceeded, Aborted and ResourceExhausted: a later attempt may succeed.
  static bool Transient(const Status& s);

 private:
  // The step after a transient failure: `retry` after the backoff, or kFail once given up.
  ClientStep Retry(ClientStep retry, const Status& cause, int64_t now_ms);
  ClientStep Refused(const std::string& task_id, const Status& why);

  const ClientSessionOptions options_;
  ClientSummary summary_;
  // Tasks whose update the server refused: training one again would send the same bytes to the
  // same refusal (a sync round hands the client its open task until the round's deadline), so the
  // client waits for other work instead.
  std::set<std::string> refused_tasks_;
  // Refusals of consecutive updates for the same reason: from the second on, the client says why
  // once and waits longer before its next task, doubling each time.
  std::string last_refusal_reason_;
  int refusals_in_a_row_ = 0;
  int failures_ = 0;
  int64_t failing_since_ms_ = -1;  // when the first of the current failures was seen; -1: none
};

}  // namespace plexus
