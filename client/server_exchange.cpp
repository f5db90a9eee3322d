#include "client/server_exchange.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "core/safetensors.h"

namespace plexus {

ServerExchange::ServerExchange(std::unique_ptr<FederationTransport> transport, std::string client_id, double wait_ms)
    : transport_(std::move(transport)), client_id_(std::move(client_id)), wait_ms_(wait_ms) {}

void ServerExchange::Cancel() {
  cancelled_ = true;
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
  while (!cancelled_ && NowMs() < until) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return !cancelled_ && NowMs() < deadline_ms;
}

Result<Task> ServerExchange::TakeTask(double deadline_ms) {
  while (true) {
    if (cancelled_) return CancelledError("the peer is leaving");
    if (!joined_) {
      Result<JoinReply> joined = transport_->Join(client_id_, 1, "peer");
      if (joined.ok()) {
        joined_ = true;
      } else if (!Pause(500, deadline_ms)) {
        return Stopped("could not join the server: " + joined.status().message());
      }
      continue;
    }
    const auto wait = static_cast<int64_t>(std::clamp(deadline_ms - NowMs(), 0.0, 2000.0));
    Result<PollAnswer> answer = transport_->Poll(client_id_, wait);
    if (answer.ok() && answer->kind == PollAnswer::Kind::kTask) return answer->task;
    if (answer.ok() && answer->kind == PollAnswer::Kind::kFinished) {
      return FailedPreconditionError("the server's federation has finished");
    }
    if (!answer.ok() && answer.status().code() == StatusCode::kNotFound) joined_ = false;  // e.g. a server restart
    const double retry = answer.ok() ? static_cast<double>(std::max<int64_t>(answer->retry_after_ms, 50)) : 500.0;
    if (!Pause(retry, deadline_ms)) {
      return Stopped("no task from the server in time" +
                     (answer.ok() ? std::string() : ": " + answer.status().message()));
    }
  }
}

Result<ModelState> ServerExchange::DownloadVersion(uint64_t version, double deadline_ms, bool wait_for_it) {
  std::string bytes;
  uint64_t total = 0;
  while (true) {
    if (cancelled_) return CancelledError("the peer is leaving");
    Status s = transport_->Download(version, &bytes, &total, {});
    if (s.ok()) break;
    // A version not published yet is not found; anything else is tried again too, from scratch.
    bytes.clear();
    if (!wait_for_it && s.code() != StatusCode::kUnavailable) return s;
    if (!Pause(100, deadline_ms)) {
      return Stopped("the server published no version after " + std::to_string(version - 1) + " in time (" +
                     s.message() + ")");
    }
  }
  PLEXUS_ASSIGN_OR_RETURN(ModelState model, DecodeSafetensors(bytes));
  model.set_version(version);
  return model;
}

Result<ModelState> ServerExchange::Exchange(const ModelState& own) {
  const double deadline = NowMs() + wait_ms_;
  PLEXUS_ASSIGN_OR_RETURN(Task task, TakeTask(deadline));
  PLEXUS_ASSIGN_OR_RETURN(ModelState global, DownloadVersion(task.model_version, deadline, false));
  if (global.ContentSha256() != task.model_sha256) {
    return DataLossError("the server's model " + std::to_string(task.model_version) + " does not match its task");
  }
  if (Status s = own.CheckSameLayout(global); !s.ok()) {
    return FailedPreconditionError("the server's model is not the peers' model (start it with the same --model): " +
                                   s.message());
  }
  ModelState delta = own;
  delta.Subtract(global);
  UploadHeader h;
  h.client_id = client_id_;
  h.task_id = task.task_id;
  h.base_version = task.model_version;
  h.num_examples = 1;
  h.local_steps = 1;
  auto payload = std::make_shared<const std::string>(EncodeSafetensors(delta));
  while (true) {
    if (cancelled_) return CancelledError("the peer is leaving");
    Result<UploadAck> ack = transport_->Upload(h, payload);
    if (ack.ok()) break;
    if (ack.status().code() != StatusCode::kUnavailable && ack.status().code() != StatusCode::kDeadlineExceeded) {
      return ack.status().WithContext("upload to the server");
    }
    h.resume = true;
    if (!Pause(200, deadline)) return Stopped("could not upload to the server in time");
  }
  spdlog::debug("server exchange: uploaded for version {}, waiting for the next", task.model_version);
  return DownloadVersion(task.model_version + 1, deadline, true);
}

}  // namespace plexus
