#include "client/server_exchange.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

namespace plexus {

ServerExchange::ServerExchange(std::unique_ptr<FederationTransport> transport, std::string client_id, double wait_ms)
    : transport_(std::move(transport)), session_(ClientSessionOptions{}, std::move(client_id)), wait_ms_(wait_ms) {}

void ServerExchange::Cancel() {
  {
    std::lock_guard<std::mutex> lock(pause_mu_);
    cancelled_ = true;
  }
  pause_cv_.notify_all();
  transport_->Shutdown();
}

double ServerExchange::NowMs() const {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Status ServerExchange::Stopped(std::string why) const {
  if (cancelled_) return CancelledError("the peer is leaving");
  return DeadlineExceededError(std::move(why));
}

bool ServerExchange::Pause(double ms, double deadline_ms) const {
  const double until = std::min(NowMs() + ms, deadline_ms);
  {
    std::unique_lock<std::mutex> lock(pause_mu_);
    const auto wake = std::chrono::steady_clock::now() +
                      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                          std::chrono::duration<double, std::milli>(std::max(0.0, until - NowMs())));
    pause_cv_.wait_until(lock, wake, [this] { return cancelled_.load(); });
  }
  return !cancelled_ && NowMs() < deadline_ms;
}

// The client's own decisions (ClientSession) take the server's answers: join (again, when a
// restarted server forgot this peer), wait, back off after failures, stop when the federation is
// over; an evaluation task is answered with no examples (a peer holds no held-out data here).
Result<Task> ServerExchange::TakeTask(double deadline_ms) {
  ClientStep step = joined_ ? ClientStep::Of(ClientStep::Kind::kPoll) : session_.Start();
  std::string last_error;
  while (true) {
    if (cancelled_) return CancelledError("the peer is leaving");
    if (step.after_ms > 0 && !Pause(static_cast<double>(step.after_ms), deadline_ms)) {
      return Stopped((joined_ ? "no task from the server in time" : "could not join the server") + last_error);
    }
    const auto now = static_cast<int64_t>(NowMs());
    switch (step.kind) {
      case ClientStep::Kind::kJoin: {
        Result<JoinReply> joined = transport_->Join(session_.client_id(), 1, "peer");
        joined_ = joined.ok();
        last_error = joined.ok() ? "" : ": " + joined.status().message();
        step = session_.JoinAnswered(joined, now);
        break;
      }
      case ClientStep::Kind::kPoll: {
        const auto wait = static_cast<int64_t>(std::clamp(deadline_ms - NowMs(), 0.0, 2000.0));
        Result<PollAnswer> answer = transport_->Poll(session_.client_id(), wait);
        last_error = answer.ok() ? "" : ": " + answer.status().message();
        if (!answer.ok() && answer.status().code() == StatusCode::kNotFound) joined_ = false;
        step = session_.PollAnswered(answer, now);
        break;
      }
      case ClientStep::Kind::kTrain:
        return step.task;
      case ClientStep::Kind::kEvaluate:
      case ClientStep::Kind::kReport: {
        if (step.kind == ClientStep::Kind::kEvaluate) evaluation_task_ = step.task.task_id;
        const Status reported = transport_->ReportEvaluation(session_.client_id(), evaluation_task_, Evaluation{});
        step = session_.EvaluationReported(evaluation_task_, reported, now);
        break;
      }
      case ClientStep::Kind::kDone:
        return FailedPreconditionError("the server's federation has finished");
      case ClientStep::Kind::kFail:
        return step.error.WithContext("the server");
      case ClientStep::Kind::kUpload:
        return InternalError("server exchange: an upload step while taking a task");
    }
  }
}

Result<ModelState> ServerExchange::DownloadVersion(uint64_t version, const std::string& sha256,
                                                   std::optional<uint32_t> crc32c, double deadline_ms,
                                                   bool wait_for_it) {
  ModelDownloadSink sink;
  while (true) {
    if (cancelled_) return CancelledError("the peer is leaving");
    Status s = transport_->Download(version, &sink);
    if (s.ok()) break;
    // A version not published yet is not found; anything else is tried again too, from scratch.
    sink.Reset();
    if (!wait_for_it && s.code() != StatusCode::kUnavailable) return s;
    if (!Pause(100, deadline_ms)) {
      return Stopped("the server published no version after " + std::to_string(version - 1) + " in time (" +
                     s.message() + ")");
    }
  }
  Result<ModelState> model = sha256.empty() ? std::move(sink).Finish() : std::move(sink).Finish(sha256, crc32c);
  if (!model.ok()) return model.status().WithContext("the server's model " + std::to_string(version));
  model->set_version(version);
  return model;
}

Result<ModelState> ServerExchange::Exchange(const ModelState& own) {
  const double deadline = NowMs() + wait_ms_;
  PLEXUS_ASSIGN_OR_RETURN(Task task, TakeTask(deadline));
  PLEXUS_ASSIGN_OR_RETURN(ModelState global,
                          DownloadVersion(task.model_version, task.model_sha256, task.model_crc32c, deadline, false));
  if (Status s = own.CheckSameLayout(global); !s.ok()) {
    return FailedPreconditionError("the server's model is not the peers' model (start it with the same --model): " +
                                   s.message());
  }
  ModelState delta = own;
  delta.Subtract(global);
  UploadHeader h;
  h.client_id = session_.client_id();
  h.task_id = task.task_id;
  h.base_version = task.model_version;
  h.num_examples = 1;
  h.local_steps = 1;
  const std::shared_ptr<const Payload> payload = Payload::SafetensorsOf(std::move(delta));
  while (true) {
    if (cancelled_) return CancelledError("the peer is leaving");
    Result<UploadAck> ack = transport_->Upload(h, payload);
    const ClientStep next = session_.UploadAnswered(h.task_id, ack, static_cast<int64_t>(NowMs()));
    if (ack.ok()) break;
    if (next.kind != ClientStep::Kind::kUpload) {
      return (next.kind == ClientStep::Kind::kFail ? next.error : ack.status()).WithContext("upload to the server");
    }
    h.resume = next.resume;
    if (!Pause(static_cast<double>(next.after_ms), deadline)) return Stopped("could not upload to the server in time");
  }
  spdlog::debug("server exchange: uploaded for version {}, waiting for the next", task.model_version);
  return DownloadVersion(task.model_version + 1, /*sha256=*/"", /*crc32c=*/std::nullopt, deadline, true);
}

}  // namespace plexus
