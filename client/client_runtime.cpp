#include "client/client_runtime.h"

#include <cstdio>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>
#include <utility>

#include "compression/codec.h"
#include "core/atomic_file.h"
#include "core/rng.h"
#include "core/safetensors.h"

namespace plexus {

std::string LocalDpAnnouncement(double clip, double noise) {
  char text[96];
  std::snprintf(text, sizeof text, "clip=%.17g,noise=%.17g", clip, noise);
  return text;
}

ClientRuntime::ClientRuntime(ClientOptions options, FederationTransport* transport, TrainerFactory make_trainer,
                             DatasetView data)
    : options_(std::move(options)),
      transport_(transport),
      make_trainer_(std::move(make_trainer)),
      data_(std::move(data)),
      session_({options_.backoff_initial_ms, options_.backoff_max_ms, options_.give_up_after_ms, options_.seed},
               !options_.client_id.empty() || !options_.state ? options_.client_id : options_.state->ClientId()) {
  if (options_.state) {
    residual_ = options_.state->LoadResidual();
    if (std::optional<OptimizerState> kept = options_.state->LoadOptimizerState()) optimizer_state_ = std::move(*kept);
  }
}

void ClientRuntime::Sleep(int64_t ms) {
  if (options_.sleep) {
    options_.sleep(ms);
    return;
  }
  // In slices of at most 50 ms, so that a stop request ends the wait promptly.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (!Stopping()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= until) return;
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(until - now, std::chrono::milliseconds(50)));
  }
}

Status ClientRuntime::BackOff(const Status& cause) {
  if (Stopping()) return Stopped();
  PLEXUS_ASSIGN_OR_RETURN(const int64_t delay, session_.RetryDelay(cause, NowMs()));
  spdlog::warn("{}; retrying in {} ms", cause.ToString(), delay);
  Sleep(delay);
  return Stopping() ? Stopped() : Status::Ok();
}

void ClientRuntime::Say(const ClientStep& step) {
  switch (step.say) {
    case ClientStep::Say::kNothing:
      return;
    case ClientStep::Say::kDebug:
      return spdlog::debug("{}", step.message);
    case ClientStep::Say::kInfo:
      return spdlog::info("{}", step.message);
    case ClientStep::Say::kWarning:
      return spdlog::warn("{}", step.message);
    case ClientStep::Say::kError:
      return spdlog::error("{}", step.message);
  }
}

Result<ClientSummary> ClientRuntime::Run(const std::atomic<bool>* stop) {
  stop_ = stop;
  Result<ClientSummary> result = RunUntilStopped();
  // A call that failed because the client was stopping (its transport cancels them) is a stop.
  if (!result.ok() && Stopping()) return Stopped();
  return result;
}

Result<bool> ClientRuntime::WaitForDevice(const char* what) {
  if (!options_.device_blocked) return false;
  bool waited = false;
  for (std::string why = options_.device_blocked(); !why.empty(); why = options_.device_blocked()) {
    if (Stopping()) return Stopped();
    if (!waited) spdlog::info("{}: {}; checking again every {} s", what, why, options_.device_check_ms / 1000.0);
    waited = true;
    Sleep(options_.device_check_ms);
  }
  if (Stopping()) return Stopped();
  return waited;
}

Result<ClientSummary> ClientRuntime::RunUntilStopped() {
  ClientStep step = session_.Start();
  while (true) {
    Say(step);
    if (step.kind == ClientStep::Kind::kDone) return session_.summary();
    if (step.kind == ClientStep::Kind::kFail) return step.error;
    if (step.after_ms > 0) Sleep(step.after_ms);
    if (Stopping()) return Stopped();
    switch (step.kind) {
      case ClientStep::Kind::kJoin:
        step = Join();
        break;
      case ClientStep::Kind::kPoll:
        step = Poll();
        break;
      case ClientStep::Kind::kTrain:
        step = Train(step.task);
        break;
      case ClientStep::Kind::kUpload:
        step = Upload(step.resume);
        break;
      case ClientStep::Kind::kEvaluate:
        step = Evaluate(step.task);
        break;
      case ClientStep::Kind::kReport:
        step = Report();
        break;
      case ClientStep::Kind::kDone:
      case ClientStep::Kind::kFail:
        break;
    }
  }
}

ClientStep ClientRuntime::Join() {
  Result<JoinReply> r = transport_->Join(session_.client_id(), static_cast<int64_t>(data_.size()), options_.device);
  if (r.ok() && !options_.contribute && (!trainer_ || r->model_name != model_name_)) {
    Result<std::unique_ptr<Trainer>> trainer = make_trainer_(r->model_name);
    if (!trainer.ok()) return ClientStep::Failed(trainer.status());
    trainer_ = std::move(trainer).value();
    model_name_ = r->model_name;
  }
  ClientStep next = session_.JoinAnswered(r, NowMs());
  if (!r.ok()) return next;
  if (options_.state) {
    if (Status saved = options_.state->SaveClientId(r->client_id); !saved.ok()) {
      spdlog::warn("cannot keep the client id in {}: {}", options_.state->path(), saved.ToString());
    }
  }
  secure_aggregation_ = r->secure_aggregation;
  spdlog::info("joined as {} (model {}, {} local examples{})", r->client_id, r->model_name, data_.size(),
               secure_aggregation_ ? "; secure aggregation: the server sees only each round's group mean" : "");
  if (!std::exchange(joined_once_, true) && TakeKeptUpdate()) return session_.ResumeKeptUpload();
  return next;
}

ClientStep ClientRuntime::Poll() {
  if (Result<bool> waited = WaitForDevice("taking no new task"); !waited.ok()) {
    return ClientStep::Failed(waited.status());
  }
  return session_.PollAnswered(transport_->Poll(session_.client_id(), options_.poll_wait_ms), NowMs());
}

bool ClientRuntime::TakeKeptUpdate() {
  if (!options_.state) return false;
  std::optional<PendingUpload> kept = options_.state->LoadPendingUpload();
  if (!kept) return false;
  if (kept->header.client_id != session_.client_id()) {
    spdlog::warn("dropping the kept update of task {}: it was trained as client {}, this is {}", kept->header.task_id,
                 kept->header.client_id, session_.client_id());
    options_.state->DropPendingUpload();
    return false;
  }
  spdlog::info("task {}: sending the update trained before the restart ({} bytes, kept in {})", kept->header.task_id,
               kept->payload.size(), options_.state->path());
  pending_upload_ = PendingUpdate{std::move(kept->header), Payload::Of(std::move(kept->payload))};
  return true;
}

std::optional<ModelState> ClientRuntime::KeptModel(uint64_t version, const std::string& sha256) {
  if (!options_.state) return std::nullopt;
  bool complete = false;
  std::string bytes = options_.state->ModelBytes(version, &complete);
  if (!complete && bytes.empty()) return std::nullopt;
  Result<ModelState> model = DecodeSafetensors(bytes);
  if (!model.ok() || model->ContentSha256() != sha256) {
    if (complete) options_.state->DropModel(version);  // a partial one is resumed instead
    return std::nullopt;
  }
  // A kill between a download's last byte and its rename leaves the whole model as a partial
  // file: resuming at its end would get nothing, so it is taken as it is.
  if (!complete) {
    if (Status s = options_.state->CompleteModel(version); !s.ok()) {
      spdlog::warn("model version {}: not kept on disk: {}", version, s.ToString());
    }
  }
  spdlog::info("model version {} from {}", version, options_.state->path());
  model->set_version(version);
  return std::move(model).value();
}

Status ClientRuntime::DownloadUntilDone(const std::function<void()>& start_over,
                                        const std::function<Status()>& attempt) {
  while (true) {
    Status s = attempt();
    if (s.ok()) break;
    if (s.code() == StatusCode::kDataLoss) start_over();  // inconsistent stream
    if (!ClientSession::Transient(s) && s.code() != StatusCode::kDataLoss) return s;
    PLEXUS_RETURN_IF_ERROR(BackOff(s));
  }
  session_.Succeeded();
  session_.CountDownload();
  return Status::Ok();
}

Result<std::shared_ptr<const ModelState>> ClientRuntime::FetchModel(const Task& task) {
  if (cached_model_ && cached_model_->version() == task.model_version) return cached_model_;
  if (std::optional<ModelState> kept = KeptModel(task.model_version, task.model_sha256)) {
    cached_model_ = std::make_shared<const ModelState>(std::move(*kept));
    cached_sha256_ = task.model_sha256;
    return cached_model_;
  }
  if (!task.download_codec.empty()) {
    std::string sha256;
    Result<ModelState> coded = FetchCodedModel(task, &sha256);
    if (coded.ok()) {
      cached_model_ = std::make_shared<const ModelState>(std::move(coded).value());
      cached_sha256_ = std::move(sha256);
      return cached_model_;
    }
    // Given up on (the server is gone, or this client was stopped): so is a float32 download.
    const StatusCode code = coded.status().code();
    if (code == StatusCode::kUnavailable || code == StatusCode::kCancelled || code == StatusCode::kDeadlineExceeded) {
      return coded.status().WithContext("model version " + std::to_string(task.model_version));
    }
    // Otherwise (no coded downloads in this transport, bytes that do not rebuild the model the
    // server described, a codec refused): the float32 model, checked against the task's SHA-256.
    spdlog::warn("model version {}: downloading float32: {}", task.model_version, coded.status().ToString());
  }
  bool keep = options_.state != nullptr;  // the bytes go to the state directory as they arrive
  // Decoded into the model as they arrive: the model is the only copy of its bytes held here.
  ModelDownloadSink sink([this, &keep, &task](uint64_t offset, std::string_view piece) {
    if (!keep) return;
    Status s = options_.state->AppendModelBytes(task.model_version, offset, piece);
    if (!s.ok()) {
      spdlog::warn("model version {}: not kept on disk any more: {}", task.model_version, s.ToString());
      keep = false;
    }
  });
  if (keep) {
    bool complete = false;
    std::string kept = options_.state->ModelBytes(task.model_version, &complete);
    if (!kept.empty()) {
      spdlog::info("model version {}: resuming the download at byte {} (kept in {})", task.model_version, kept.size(),
                   options_.state->path());
      sink.Prefill(std::move(kept));
    }
  }
  PLEXUS_RETURN_IF_ERROR(
      DownloadUntilDone([&] { sink.Reset(); }, [&] { return transport_->Download(task.model_version, &sink); }));
  Result<ModelState> model = std::move(sink).Finish(task.model_sha256, task.model_crc32c);
  if (!model.ok()) {
    if (options_.state) options_.state->DropModel(task.model_version);
    return model.status().WithContext("model version " + std::to_string(task.model_version));
  }
  if (keep) {
    if (Status s = options_.state->CompleteModel(task.model_version); !s.ok()) {
      spdlog::warn("model version {}: not kept on disk: {}", task.model_version, s.ToString());
    }
  }
  model->set_version(task.model_version);
  cached_model_ = std::make_shared<const ModelState>(std::move(model).value());
  cached_sha256_ = task.model_sha256;
  return cached_model_;
}

// Errors: DataLoss for bytes that do not rebuild what the server described.
// A coded download is not kept in the state directory: what it rebuilds is not the task's model
// bit for bit (its SHA-256 is not the task's), so a restarted client downloads it again.
Result<ModelState> ClientRuntime::FetchCodedModel(const Task& task, std::string* sha256) {
  PLEXUS_ASSIGN_OR_RETURN(std::unique_ptr<Codec> codec, MakeCodec(task.download_codec));
  const std::string base_sha256 = cached_model_ ? cached_sha256_ : "";
  std::string bytes;
  uint64_t total = 0;
  CodedDownload info;
  PLEXUS_RETURN_IF_ERROR(DownloadUntilDone([&] { bytes.clear(); },
                                           [&] {
                                             return transport_->DownloadCoded(task.model_version, task.download_codec,
                                                                              base_sha256, &bytes, &total, &info);
                                           }));
  if (info.codec != task.download_codec) {
    return DataLossError("the server sent the model in '" + info.codec + "', not the task's '" + task.download_codec +
                         "'");
  }
  Result<ModelState> model = InternalError("unset");
  if (!info.base_sha256.empty()) {
    if (info.base_sha256 != base_sha256) {
      return DataLossError("the server sent a change from a model this client does not hold");
    }
    Result<ModelState> change = codec->Decode(bytes, *cached_model_);
    if (!change.ok()) return DataLossError("the coded download does not decode: " + change.status().message());
    model = *cached_model_;
    model->Add(*change);
  } else {
    // Every download codec takes at least a byte per value: a layout with more values than the
    // bytes is refused before it is allocated.
    uint64_t values = 0;
    for (const TensorSpec& t : info.layout) {
      uint64_t n = 1;
      for (int64_t d : t.shape) {
        if (d < 0 || (d > 0 && n > bytes.size() / static_cast<uint64_t>(d))) {
          return DataLossError("the coded model's layout is larger than its bytes");
        }
        n *= static_cast<uint64_t>(d);
      }
      values += n;
      if (values > bytes.size()) return DataLossError("the coded model's layout is larger than its bytes");
    }
    Result<ModelState> layout = ModelState::Create(info.layout);
    if (layout.ok()) model = codec->Decode(bytes, *layout);
    if (!layout.ok() || !model.ok()) {
      return DataLossError("the coded download does not decode: " +
                           (layout.ok() ? model.status() : layout.status()).message());
    }
  }
  if (model->ContentSha256() != info.model_sha256) {
    return DataLossError("the model rebuilt from the coded download does not match the server's SHA-256");
  }
  *sha256 = info.model_sha256;
  model->set_version(task.model_version);
  spdlog::info("model version {}: {} bytes in {} ({})", task.model_version, bytes.size(), info.codec,
               info.base_sha256.empty() ? "the whole model" : "the change from the last download");
  return model;
}

ClientStep ClientRuntime::Evaluate(const Task& task) {
  Result<std::shared_ptr<const ModelState>> model = FetchModel(task);
  if (!model.ok()) return session_.TaskFailed(task, model.status());
  Evaluation e;  // zero examples when this client holds no evaluation data
  if (options_.eval_data.size() > 0) {
    Result<Evaluation> measured = trainer_->Evaluate(**model, options_.eval_data);
    if (!measured.ok()) {
      spdlog::warn("evaluation task {}: {}", task.task_id, measured.status().ToString());
    } else {
      e = *measured;
    }
  }
  pending_report_ = PendingReport{task, e};
  return Report();
}

ClientStep ClientRuntime::Report() {
  if (!pending_report_) return ClientStep::Failed(InternalError("no evaluation to report"));
  const Task& task = pending_report_->task;
  const Evaluation& e = pending_report_->evaluation;
  const Status reported = transport_->ReportEvaluation(session_.client_id(), task.task_id, e);
  if (reported.ok()) {
    spdlog::info("task {}: version {} scores accuracy {:.4f}, loss {:.4f} on {} held-out examples", task.task_id,
                 task.model_version, e.accuracy, e.loss, e.examples);
  }
  ClientStep next = session_.EvaluationReported(task.task_id, reported, NowMs());
  if (next.kind != ClientStep::Kind::kReport) pending_report_.reset();
  return next;
}

ClientStep ClientRuntime::Train(const Task& task) {
  if (secure_aggregation_) return TrainSecurely(task);
  if (options_.contribute) return Contribute(task);
  Result<TrainedDelta> trained = TrainDelta(task);
  if (!trained.ok()) return session_.TaskFailed(task, trained.status());
  SaveUpdateCopy(task, *trained);
  const TrainOutcome& out = trained->outcome;
  UploadHeader h;
  std::shared_ptr<const Payload> payload = EncodeUpdate(task, std::move(trained->delta), &h.codec);

  h.client_id = session_.client_id();
  h.task_id = task.task_id;
  h.base_version = task.model_version;
  h.num_examples = out.num_examples;
  h.local_steps = out.steps;
  h.metrics["train_loss"] = out.mean_loss;
  if (options_.state) {
    // Kept until the server answers, so that a restart sends it (or its rest) instead of
    // training again.
    if (Status kept = options_.state->SavePendingUpload(h, *payload); !kept.ok()) {
      spdlog::warn("task {}: update not kept on disk: {}", task.task_id, kept.ToString());
    }
  }
  pending_upload_ = PendingUpdate{std::move(h), std::move(payload)};
  return session_.Trained();
}

ClientStep ClientRuntime::Contribute(const Task& task) {
  Result<std::shared_ptr<const ModelState>> model = FetchModel(task);
  if (!model.ok()) return session_.TaskFailed(task, model.status());
  Result<Contribution> made = options_.contribute(task, **model);
  if (!made.ok()) return session_.TaskFailed(task, made.status());
  UploadHeader h;
  h.client_id = session_.client_id();
  h.task_id = task.task_id;
  h.base_version = task.model_version;
  h.num_examples = made->num_examples;
  h.metrics = std::move(made->metrics);
  h.codec = std::move(made->codec);
  pending_upload_ = PendingUpdate{std::move(h), Payload::Of(std::move(made->payload))};
  return session_.Trained();
}

Result<ClientRuntime::TrainedDelta> ClientRuntime::TrainDelta(const Task& task) {
  Result<std::shared_ptr<const ModelState>> fetched = FetchModel(task);
  if (!fetched.ok()) return fetched.status();
  const ModelState& model = **fetched;
  TrainOptions o = TrainOptionsFor(task, Rng::Derive(options_.seed, task.round).NextU64());
  if (options_.device_blocked) {
    o.before_step = [this, &task](int64_t step) -> Status {
      PLEXUS_ASSIGN_OR_RETURN(bool waited, WaitForDevice("pausing the task"));
      if (waited) {
        session_.CountPause();
        spdlog::info("task {}: resuming at step {}", task.task_id, step);
      }
      return Status::Ok();
    };
  }
  spdlog::info("task {}: training round {} from version {}", task.task_id, task.round, task.model_version);
  const auto started = std::chrono::steady_clock::now();
  o.optimizer_state = &optimizer_state_;
  Result<TrainOutcome> out = trainer_->Train(model, data_, o);
  if (!out.ok()) return out.status();
  if (options_.state && o.optimizer == "adamw") {
    if (Status kept = options_.state->SaveOptimizerState(optimizer_state_); !kept.ok()) {
      spdlog::warn("task {}: the optimizer's moments are not kept on disk: {}", task.task_id, kept.ToString());
    }
  }
  if (options_.slowdown > 1.0) {
    const double trained_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
    Sleep(static_cast<int64_t>(trained_ms * (options_.slowdown - 1.0)));
  }

  ModelState delta = std::move(out->weights);
  delta.Subtract(model);
  if (options_.local_dp_clip > 0) {  // the update leaves this client clipped and noised, or not at all
    if (!local_dp_noise_) local_dp_noise_ = MakeSecureGaussianNoise();
    Status noised = ClipAndAddNoise(delta.data(), options_.local_dp_clip, options_.local_dp_noise, *local_dp_noise_);
    if (!noised.ok()) {  // a non-finite update: training diverged (skip the task); else the generator failed
      return noised.code() == StatusCode::kInvalidArgument ? AbortedError(noised.message())
                                                           : noised.WithContext("local DP");
    }
    ++local_dp_releases_;
  }
  return TrainedDelta{std::move(delta), std::move(out).value()};
}

void ClientRuntime::SaveUpdateCopy(const Task& task, const TrainedDelta& trained) {
  if (options_.save_updates_dir.empty()) return;
  const std::filesystem::path path =
      std::filesystem::path(options_.save_updates_dir) /
      (task.task_id + ".n" + std::to_string(trained.outcome.num_examples) + ".safetensors");
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (Status s = WriteSafetensorsFile(path.string(), trained.delta); !s.ok()) {
    spdlog::warn("task {}: no copy of the update kept: {}", task.task_id, s.ToString());
  }
}

std::shared_ptr<const Payload> ClientRuntime::EncodeUpdate(const Task& task, ModelState delta,
                                                           std::string* codec_used) {
  if (!task.upload_codec.empty()) {
    Result<std::unique_ptr<Codec>> codec = MakeCodec(task.upload_codec);
    if (codec.ok()) {
      ModelState* residual = nullptr;
      if ((*codec)->uses_residual()) {
        if (!residual_ || !residual_->CheckSameLayout(delta).ok()) residual_ = ModelState::ZerosLike(delta);
        residual = &*residual_;
      }
      const uint64_t seed = Rng::Derive(options_.seed ^ 0xc0dec0dec0dec0deULL, task.round).NextU64();
      std::shared_ptr<const Payload> bytes = Payload::Of((*codec)->Encode(delta, residual, seed));
      if (residual && options_.state) {
        if (Status kept = options_.state->SaveResidual(*residual); !kept.ok()) {
          spdlog::warn("the {} residual is not kept on disk: {}", task.upload_codec, kept.ToString());
        }
      }
      *codec_used = task.upload_codec;
      return bytes;
    }
    // The server named a codec this client does not know: float32 is always accepted.
    spdlog::warn("task {}: sending float32: {}", task.task_id, codec.status().ToString());
  }
  codec_used->clear();
  return Payload::SafetensorsOf(std::move(delta));
}

ClientStep ClientRuntime::Upload(bool resume) {
  if (!pending_upload_) return ClientStep::Failed(InternalError("no update to upload"));
  UploadHeader& h = pending_upload_->header;
  h.resume = resume || h.resume;  // the server may hold what arrived before a failure or restart
  h.want_next_task = true;
  const Result<UploadAck> ack = transport_->Upload(h, pending_upload_->payload);
  if (!ack.ok() && Stopping()) return ClientStep::Failed(Stopped());  // cancelled, not refused
  if (ack.ok()) {
    const auto loss = h.metrics.find("train_loss");
    spdlog::info("task {}: uploaded ({} steps, train loss {:.4f}; {} bytes{}; server at version {})", h.task_id,
                 h.local_steps, loss == h.metrics.end() ? 0.0 : loss->second, pending_upload_->payload->size(),
                 h.codec.empty() ? "" : " in " + h.codec, ack->accepted_for_version);
  }
  const std::string task_id = h.task_id;
  ClientStep next = session_.UploadAnswered(task_id, ack, NowMs());
  // Acknowledged or refused: nothing to send again. An upload given up on stays kept, for the
  // next run to send.
  if (ack.ok() || !ClientSession::Transient(ack.status())) {
    pending_upload_.reset();
    if (options_.state) options_.state->DropPendingUpload();
  }
  return next;
}

}  // namespace plexus
