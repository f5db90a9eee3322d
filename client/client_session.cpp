#include "client/client_session.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <utility>

#include "core/rng.h"

namespace plexus {
namespace {

// How often a client whose task's update was refused asks again, while the server still hands it
// that task.
constexpr int64_t kRefusedTaskPollMs = 1000;
// The longest a client waits after refusals of its updates for the same reason.
constexpr int64_t kMaxRefusalBackoffMs = 300000;
// The longest a client waits when the server says wait: it asks again at least this often.
constexpr int64_t kMaxServerWaitMs = 5000;
// Old rounds' refused task ids are forgotten past this many: bounded memory.
constexpr size_t kMaxRefusedTasks = 1024;

// A refusal's reason without what changes from one update to the next (task ids, numbers): two
// refusals by the same bound for different norms are the same reason.
std::string RefusalReason(const Status& s, const std::string& task_id) {
  std::string m = s.message();
  for (size_t at; !task_id.empty() && (at = m.find(task_id)) != std::string::npos;) m.erase(at, task_id.size());
  std::string reason = std::to_string(static_cast<int>(s.code())) + ":";
  for (char c : m) {
    if (!std::isdigit(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '+') reason += c;
  }
  return reason;
}

ClientStep Poll(int64_t after_ms = 0, ClientStep::Pause pause = ClientStep::Pause::kNone) {
  ClientStep step = ClientStep::Of(ClientStep::Kind::kPoll);
  step.after_ms = after_ms;
  step.pause = pause;
  return step;
}

ClientStep Fail(Status error) { return ClientStep::Failed(std::move(error)); }

// Sends the update again; the server may hold its first part.
ClientStep Resend() {
  ClientStep step = ClientStep::Of(ClientStep::Kind::kUpload);
  step.resume = true;
  return step;
}

ClientStep Saying(ClientStep step, ClientStep::Say say, std::string message) {
  step.say = say;
  step.message = std::move(message);
  return step;
}

}  // namespace

ClientSession::ClientSession(ClientSessionOptions options, std::string client_id) : options_(options) {
  summary_.client_id = std::move(client_id);
}

bool ClientSession::Transient(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded ||
         s.code() == StatusCode::kAborted || s.code() == StatusCode::kResourceExhausted;
}

ClientStep ClientSession::Start() const { return ClientStep::Of(ClientStep::Kind::kJoin); }

Result<int64_t> ClientSession::RetryDelay(const Status& cause, int64_t now_ms) {
  const double base = std::min<double>(static_cast<double>(options_.backoff_max_ms),
                                       static_cast<double>(options_.backoff_initial_ms) * std::pow(2.0, failures_));
  if (failing_since_ms_ < 0) failing_since_ms_ = now_ms;
  // The jitter is drawn from the stretch's start and the attempt, not from a generator's state,
  // so that a session at rest keeps nothing a new one would not have.
  const double jitter =
      Rng::Derive(options_.seed ^ 0xbac0ffULL, static_cast<uint64_t>(failing_since_ms_) * 64 + failures_).Uniform();
  const auto delay = static_cast<int64_t>(base * (0.5 + 0.5 * jitter));
  const int64_t failing_for_ms = now_ms - failing_since_ms_;
  if (failing_for_ms + delay > options_.give_up_after_ms) {
    return UnavailableError("giving up after " + std::to_string(failing_for_ms / 1000) +
                            " s of failures: " + cause.ToString());
  }
  ++failures_;
  return delay;
}

ClientStep ClientSession::Retry(ClientStep retry, const Status& cause, int64_t now_ms) {
  Result<int64_t> delay = RetryDelay(cause, now_ms);
  if (!delay.ok()) return Fail(delay.status());
  retry.after_ms = *delay;
  retry.pause = ClientStep::Pause::kBackoff;
  return Saying(std::move(retry), ClientStep::Say::kWarning,
                cause.ToString() + "; retrying in " + std::to_string(*delay) + " ms");
}

ClientStep ClientSession::JoinAnswered(const Result<JoinReply>& reply, int64_t now_ms) {
  if (!reply.ok()) {
    if (!Transient(reply.status())) return Fail(reply.status());
    return Retry(ClientStep::Of(ClientStep::Kind::kJoin), reply.status(), now_ms);
  }
  summary_.client_id = reply->client_id;
  Succeeded();
  return Poll();
}

ClientStep ClientSession::ResumeKeptUpload() {
  ++summary_.uploads_resumed_after_restart;
  return Resend();
}

ClientStep ClientSession::PollAnswered(const Result<PollAnswer>& answer, int64_t now_ms) {
  if (!answer.ok()) {
    if (answer.status().code() == StatusCode::kNotFound) {
      return Saying(ClientStep::Of(ClientStep::Kind::kJoin), ClientStep::Say::kWarning,
                    "the server does not know this client any more; joining again");
    }
    if (!Transient(answer.status())) return Fail(answer.status());
    return Retry(Poll(), answer.status(), now_ms);
  }
  Succeeded();
  switch (answer->kind) {
    case PollAnswer::Kind::kFinished:
      return Saying(ClientStep::Of(ClientStep::Kind::kDone), ClientStep::Say::kInfo,
                    "federation finished; " + std::to_string(summary_.tasks_completed) + " tasks done");
    case PollAnswer::Kind::kWait:
      return Poll(std::clamp<int64_t>(answer->retry_after_ms, 0, kMaxServerWaitMs), ClientStep::Pause::kServerSaidWait);
    case PollAnswer::Kind::kTask:
      break;
  }
  if (refused_tasks_.count(answer->task.task_id)) {
    return Saying(Poll(kRefusedTaskPollMs, ClientStep::Pause::kRefusedTask), ClientStep::Say::kDebug,
                  "task " + answer->task.task_id + ": its update was refused; waiting for other work");
  }
  ClientStep work = ClientStep::Of(answer->task.evaluate_only ? ClientStep::Kind::kEvaluate : ClientStep::Kind::kTrain);
  work.task = answer->task;
  return work;
}

ClientStep ClientSession::TaskFailed(const Task& task, const Status& why) {
  const char* what = task.evaluate_only ? "evaluation task " : "task ";
  if (why.code() == StatusCode::kDataLoss || why.code() == StatusCode::kNotFound) {
    return Saying(Poll(), ClientStep::Say::kWarning,
                  std::string("skipping ") + what + task.task_id + ": " + why.ToString());
  }
  if (why.code() == StatusCode::kAborted && !task.evaluate_only) {
    // Local training diverged: nothing worth sending. The task is dropped (the server's deadline
    // or a later task replaces it) and the client goes on with the next one.
    ++summary_.tasks_failed;
    return Saying(Poll(), ClientStep::Say::kWarning, "task " + task.task_id + ": dropped: " + why.ToString());
  }
  return Fail(why.WithContext(what + task.task_id));
}

ClientStep ClientSession::UploadAnswered(const std::string& task_id, const Result<UploadAck>& ack, int64_t now_ms) {
  if (ack.ok()) {
    ++summary_.tasks_completed;
    Succeeded();
    refusals_in_a_row_ = 0;
    last_refusal_reason_.clear();
    if (ack->next) return PollAnswered(*ack->next, now_ms);
    return Poll();
  }
  if (Transient(ack.status())) return Retry(Resend(), ack.status(), now_ms);
  return Refused(task_id, ack.status());
}

// The round closed, the task expired or the server refused the update: it is dropped, and the
// client polls again.
ClientStep ClientSession::Refused(const std::string& task_id, const Status& why) {
  ++summary_.tasks_refused;
  if (refused_tasks_.size() >= kMaxRefusedTasks) refused_tasks_.clear();
  refused_tasks_.insert(task_id);
  const std::string reason = RefusalReason(why, task_id);
  refusals_in_a_row_ = reason == last_refusal_reason_ ? refusals_in_a_row_ + 1 : 1;
  last_refusal_reason_ = reason;
  if (refusals_in_a_row_ < 2) {
    return Saying(Poll(), ClientStep::Say::kWarning,
                  "task " + task_id + ": update refused: " + why.ToString() + "; waiting for other work");
  }
  // Training again at once would most likely meet the same refusal: say so once, back off.
  const int64_t delay =
      std::min<int64_t>(kMaxRefusalBackoffMs, kRefusedTaskPollMs << std::min(refusals_in_a_row_ - 1, 20));
  return Saying(Poll(delay, ClientStep::Pause::kRefusals), ClientStep::Say::kError,
                "the server refused this client's last " + std::to_string(refusals_in_a_row_) +
                    " updates for the same reason: " + why.ToString() + "; next task in " +
                    std::to_string(delay / 1000) + " s");
}

ClientStep ClientSession::EvaluationReported(const std::string& task_id, const Status& reported, int64_t now_ms) {
  if (reported.ok()) {
    Succeeded();
    ++summary_.evaluations;
    return Poll();
  }
  if (Transient(reported)) return Retry(ClientStep::Of(ClientStep::Kind::kReport), reported, now_ms);
  // Refused (the evaluation closed meanwhile): nothing to keep.
  return Saying(Poll(), ClientStep::Say::kWarning,
                "evaluation task " + task_id + ": report refused: " + reported.ToString());
}

}  // namespace plexus
