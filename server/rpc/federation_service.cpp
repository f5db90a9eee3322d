#include "server/rpc/federation_service_impl.h"

#include <algorithm>
#include <chrono>

namespace plexus {

void FederationServiceImpl::VersionServedLocked(const RoundRecord& r, std::string_view how) {
  const int64_t now = clock_->NowMs();
  if (closing_upload_received_ms_ >= 0 && last_served_ms_ >= 0) {
    ++upload_metrics_.versions_timed;
    upload_metrics_.after_last_upload_ms_sum += static_cast<double>(now - closing_upload_received_ms_);
    upload_metrics_.version_interval_ms_sum += static_cast<double>(now - last_served_ms_);
  }
  closing_upload_received_ms_ = -1;
  last_served_ms_ = now;
  spdlog::info("round {} closed{}: {} updates, {} dropped{}, version {}{}", r.round, how, r.num_updates, r.num_dropped,
               r.num_refused > 0 ? fmt::format(", {} refused", r.num_refused) : std::string(), r.model_version,
               r.test_accuracy
                   ? fmt::format(", test accuracy {:.4f}, loss {:.4f}", *r.test_accuracy, r.test_loss.value_or(0.0))
                   : std::string());
}

FederationServiceImpl::FederationServiceImpl(Engine* engine, Store* store, ServerInfo info, bool mtls,
                                             const DoorLimits& limits, const Clock* clock)
    : engine_(engine),
      store_(store),
      info_(std::move(info)),
      limits_(limits),
      clock_(clock),
      identity_(mtls, limits.tokens, limits.revoked),
      partial_(clock),
      places_({limits.max_concurrent_uploads, limits.upload_slot_wait_ms, limits.upload_stall_ms,
               limits.upload_min_bytes_per_s, limits.upload_rate_window_ms},
              clock),
      rate_(limits.requests_per_s, limits.burst, clock),
      norm_gate_({limits.max_update_norm, limits.adaptive_norm_factor, limits.adaptive_norm_clients,
                  limits.adaptive_norm_min_clients},
                 engine->model(), info_.buffer_tensors),
      evaluations_(info_.federated_eval, engine, store, clock) {
  if (!info_.upload_codec.empty()) {
    upload_codec_ = std::move(MakeCodec(info_.upload_codec)).value();  // FederationServer::Start checked it
    codec_layout_ = ModelState::UninitializedLike(engine_->model());   // only its layout is read
  }
  if (info_.accept_partial_sums) {
    partial_sum_codec_ = std::move(MakeCodec(kPartialSumCodec)).value();
    if (!codec_layout_) codec_layout_ = ModelState::UninitializedLike(engine_->model());
  }
  if (info_.max_bundle_updates > 0) {
    bundle_codec_ = std::move(MakeCodec(kUpdateBundleCodec)).value();
    if (!codec_layout_) codec_layout_ = ModelState::UninitializedLike(engine_->model());
  }
  downloads_ = std::move(ModelDownloads::Create(store_, info_.download_codec)).value();  // Start checked it
  // DownloadModel and UploadUpdate move the model's bytes as gRPC's raw buffers (the generated
  // handlers would copy them into and out of protobuf messages). gRPC's hook for swapping a
  // method's handler is MarkMethodStreamed, which also relabels the method bidirectional: to a
  // server, a server stream is a bidirectional one with a single request and a client stream
  // one with a single reply, so clients see no difference.
  MarkMethodStreamed(kDownloadModelMethod,
                     new grpc::internal::SplitServerStreamingHandler<v1::DownloadModelRequest, grpc::ByteBuffer>(
                         [this](grpc::ServerContext* ctx,
                                grpc::ServerSplitStreamer<v1::DownloadModelRequest, grpc::ByteBuffer>* stream) {
                           return DownloadModelRaw(ctx, stream);
                         }));
  MarkMethodStreamed(
      kUploadUpdateMethod,
      new grpc::internal::ClientStreamingHandler<FederationServiceImpl, grpc::ByteBuffer, v1::UploadReply>(
          [](FederationServiceImpl* s, grpc::ServerContext* ctx, grpc::ServerReader<grpc::ByteBuffer>* reader,
             v1::UploadReply* rep) { return s->UploadUpdateRaw(ctx, reader, rep); },
          this));
}

grpc::Status FederationServiceImpl::Join(grpc::ServerContext* ctx, const v1::JoinRequest* req, v1::JoinReply* rep) {
  Result<std::string> claimed = Identify(ctx, req->client_id());
  if (!claimed.ok()) return Refuse("join", claimed.status());
  if (req->local_dp() != info_.local_dp) {  // a federation either noises every update locally or none
    return Refuse("join",
                  FailedPreconditionError(
                      info_.local_dp.empty()
                          ? "this server runs no local DP: clients that add noise (" + req->local_dp() +
                                ") would be mixed with clients that do not; join without --dp"
                          : "this server's clients run --dp local:" + info_.local_dp +
                                (req->local_dp().empty() ? ", this one none" : ", not local:" + req->local_dp())));
  }
  if (engine_->secure_aggregation() && !req->secure_aggregation()) {
    return Refuse("join", FailedPreconditionError("this server runs secure aggregation (--secagg) and this client "
                                                  "cannot take part: update it to a plexus client that can"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (Status limited = RateLimited(*claimed); !limited.ok()) return RefuseLocked("join", limited);
  Result<std::string> id = engine_->Join({*claimed, req->num_examples(), req->device()});
  if (!id.ok()) return RefuseLocked("join", id.status());
  rep->set_client_id(*id);
  rep->set_model_name(info_.model_name);
  rep->set_secure_aggregation(engine_->secure_aggregation());
  for (const std::string& server : info_.fallback_servers) rep->add_fallback_servers(server);
  active_clients_.insert(*id);
  evaluations_.Declare(*id, req->num_examples());
  client_codecs_[*id] = std::set<std::string>(req->codecs().begin(), req->codecs().end());
  spdlog::info("client {} joined ({} examples, {})", *id, req->num_examples(), req->device());
  cv_.notify_all();
  return grpc::Status::OK;
}

grpc::Status FederationServiceImpl::PollTask(grpc::ServerContext* ctx, const v1::PollTaskRequest* req,
                                             v1::PollTaskReply* rep) {
  const int64_t deadline_ms = clock_->NowMs() + std::min<int64_t>(req->wait_ms(), kMaxPollWaitMs);
  Result<std::string> who = Identify(ctx, req->client_id());
  if (!who.ok()) return Refuse("poll", who.status());
  std::unique_lock<std::mutex> lock(mu_);
  if (Status limited = RateLimited(req->client_id()); !limited.ok()) return RefuseLocked("poll", limited);
  // Each waiting poll holds a server thread: beyond the cap, callers are told to come back.
  if (limits_.max_long_polls > 0 && open_polls_ >= limits_.max_long_polls) {
    return RefuseLocked("poll",
                        ResourceExhaustedError("the server already holds " + std::to_string(limits_.max_long_polls) +
                                               " waiting polls (--max-long-polls); retry later"));
  }
  struct OpenPoll {  // destroyed before `lock`, so the count changes under mu_
    int& n;
    explicit OpenPoll(int& count) : n(++count) {}
    ~OpenPoll() { --n; }
  } open(open_polls_);
  while (true) {
    Result<PollAnswer> a = evaluations_.Poll(req->client_id());
    if (!a.ok()) return RefuseLocked("poll", a.status());
    if (AnswerLocked(req->client_id(), *a, rep)) return grpc::Status::OK;
    const int64_t now_ms = clock_->NowMs();
    if (now_ms >= deadline_ms || ctx->IsCancelled() || shutting_down_) {
      rep->set_retry_after_ms(static_cast<uint32_t>(std::min<int64_t>(a->retry_after_ms, 1000)));
      return grpc::Status::OK;
    }
    cv_.wait_for(lock, std::chrono::milliseconds(std::min<int64_t>(deadline_ms - now_ms, a->retry_after_ms)));
  }
}

grpc::Status FederationServiceImpl::DownloadModelRaw(
    grpc::ServerContext* ctx, grpc::ServerSplitStreamer<v1::DownloadModelRequest, grpc::ByteBuffer>* stream) {
  v1::DownloadModelRequest req;
  if (!stream->Read(&req)) return Refuse("download", InvalidArgumentError("a download needs its request"));
  // The model is the federation's work: only a proven, unrevoked caller within its rate gets it.
  Result<std::string> who = Identify(ctx, req.client_id());
  if (!who.ok()) return Refuse("download", who.status());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (Status limited = RateLimited(*who); !limited.ok()) return RefuseLocked("download", limited);
  }
  v1::ModelChunk fields;  // all but data, which follows each chunk's fields
  fields.set_version(req.version());
  Result<std::shared_ptr<const Payload>> bytes = InternalError("no model");
  if (req.codec().empty()) {
    bytes = downloads_->Float32(req.version(), Snapshot());
  } else {
    if (!downloads_->Serves(req.codec())) {
      return Refuse("download", InvalidArgumentError(
                                    "a coded download of model version " + std::to_string(req.version()) + " in '" +
                                    req.codec() + "': the server's download codec is '" + info_.download_codec + "'"));
    }
    std::optional<uint64_t> held_version;  // the published version whose hash the client named
    std::shared_ptr<const ModelState> current = Snapshot(req.base_sha256(), &held_version);
    Result<CodedDownloads::Download> coded = downloads_->Coded(req.version(), req.base_sha256(), current, held_version);
    if (!coded.ok()) return ToGrpc(coded.status());
    bytes = Payload::Of(coded->bytes);
    fields.set_codec(info_.download_codec);
    fields.set_base_sha256(coded->base_sha256);
    fields.set_model_sha256(coded->model_sha256);
    if (coded->base_sha256.empty()) {  // the whole model: its tensors, for a client that holds none
      for (const TensorSlot& t : coded->rebuilt->tensors()) {
        v1::TensorLayout* l = fields.add_layout();
        l->set_name(t.name);
        for (int64_t d : t.shape) l->add_shape(d);
      }
    }
  }
  if (!bytes.ok()) return ToGrpc(bytes.status());
  const size_t size = (*bytes)->size();
  if (req.offset() > size) {
    return ToGrpc(OutOfRangeError("offset " + std::to_string(req.offset()) + " is past the " + std::to_string(size) +
                                  "-byte model"));
  }
  for (size_t off = req.offset(); off < size || (off == 0 && size == 0); off += kChunkBytes) {
    if (ctx->IsCancelled()) return grpc::Status::CANCELLED;
    const size_t n = std::min(kChunkBytes, size - off);
    fields.set_total_bytes(size);
    fields.set_offset(off);
    const std::string head = fields.SerializeAsString() + LengthDelimitedFieldHeader(kModelChunkDataField, n);
    grpc::Slice parts[3] = {grpc::Slice(head)};
    grpc::ByteBuffer message(parts, 1 + PayloadSlices(*bytes, off, n, parts + 1));
    if (!stream->Write(message)) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "client went away");
    download_bytes_ += static_cast<int64_t>(n);
    if (size == 0) break;
  }
  return grpc::Status::OK;
}

grpc::Status FederationServiceImpl::GetStatus(grpc::ServerContext* ctx, const v1::StatusRequest*,
                                              v1::StatusReply* rep) {
  // With tokens or mutual TLS the status (client and task ids) is for proven callers only,
  // unless the operator opened it (--public-status); with admins, for them only.
  if (!limits_.admins.empty() || (identity_.proven() && !limits_.public_status)) {
    Result<std::string> who = Identify(ctx, "");
    if (!who.ok()) return Refuse("status", who.status());
    if (!limits_.admins.empty() && !limits_.admins.count(*who)) {
      return Refuse("status",
                    PermissionDeniedError("the status is for this server's admins; '" + *who + "' is not one"));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  EngineStatusToProto(StatusLocked(), rep);
  rep->set_model_name(info_.model_name);
  rep->set_rounds_total(info_.rounds_total);
  rep->set_strategy(engine_->strategy_description());
  if (info_.dp_epsilon) {
    const double epsilon = info_.dp_epsilon(rep->model_version());
    rep->set_has_dp_epsilon(std::isfinite(epsilon));  // not finite: noise 0, nothing private
    if (std::isfinite(epsilon)) rep->set_dp_epsilon(epsilon);
    rep->set_dp_delta(info_.dp_delta);
  }
  for (const auto& [code, count] : refusals_) (*rep->mutable_refusals())[code] = count;
  rep->set_uploads_resumed(uploads_resumed_);
  rep->set_upload_bytes_resumed(upload_bytes_resumed_);
  rep->set_upload_bytes_received(places_.received_bytes());
  if (!engine_->history().empty()) MergedToProto(engine_->history().back().merged, rep);
  return grpc::Status::OK;
}

EngineStatus FederationServiceImpl::status() {
  std::lock_guard<std::mutex> lock(mu_);
  return StatusLocked();
}

Status FederationServiceImpl::WithEngine(const std::function<Status(Engine&)>& fn) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t before = engine_->model().version();
  const uint64_t epoch = engine_->poll_epoch();
  Status s = fn(*engine_);
  if (engine_->model().version() != before) {
    spdlog::info("serving version {} ({})", engine_->model().version(),
                 engine_->history().back().model_sha256.substr(0, 12));
  }
  // Only when a poll may be answered differently: a caller that looks every few milliseconds
  // (an edge's upstream) must not wake every waiting long poll each time.
  if (engine_->poll_epoch() != epoch) cv_.notify_all();
  return s;
}

bool FederationServiceImpl::WaitForEngine(const std::function<bool(Engine&)>& ready, int64_t max_wait_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  bool answer = false;
  cv_.wait_for(lock, std::chrono::milliseconds(std::max<int64_t>(0, max_wait_ms)),
               [&] { return (answer = ready(*engine_)) || shutting_down_; });
  return answer;
}

std::map<uint64_t, RoundRecord> FederationServiceImpl::FederatedEvaluations() {
  std::lock_guard<std::mutex> lock(mu_);
  evaluations_.Update();
  return evaluations_.results();
}

ServerMetrics FederationServiceImpl::metrics() {
  std::lock_guard<std::mutex> lock(mu_);
  ServerMetrics m = upload_metrics_;
  m.engine = StatusLocked();
  m.refusals = refusals_;
  m.uploads_resumed = uploads_resumed_;
  m.upload_bytes_resumed = upload_bytes_resumed_;
  m.open_polls = open_polls_;
  m.download_bytes = download_bytes_.load();
  m.received_upload_bytes = places_.received_bytes();
  const std::vector<RoundRecord>& history = engine_->history();
  for (const RoundRecord& r : history) {
    if (r.test_accuracy) m.accuracy.emplace_back(r.model_version, *r.test_accuracy);
  }
  if (!history.empty()) {
    m.last_round = history.back();
    m.last_round->logged_done.clear();
  }
  return m;
}

bool FederationServiceImpl::AllClientsToldFinished() {
  std::lock_guard<std::mutex> lock(mu_);
  evaluations_.Update();
  if (evaluations_.final_pending()) return false;
  for (const std::string& id : active_clients_) {
    if (!told_finished_.count(id)) return false;
  }
  return true;
}

void FederationServiceImpl::Tick() {
  places_.CancelStalled();
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t before = engine_->model().version();
  Status s = engine_->Tick();
  if (!s.ok()) spdlog::error("{}", s.ToString());
  if (engine_->model().version() != before) VersionServedLocked(engine_->history().back(), " at its deadline");
  LogSecureStageLocked();
  cv_.notify_all();
}

void FederationServiceImpl::RunCommits(const std::atomic<bool>& stop) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    std::optional<PendingCommit> commit = engine_->TakeCommit();
    if (!commit) {
      if (stop) return;
      cv_.wait_for(lock, std::chrono::milliseconds(200));
      continue;
    }
    lock.unlock();
    Status committed = commit->Run(store_);
    lock.lock();
    Status s = engine_->FinishCommit(std::move(*commit), std::move(committed));
    if (s.ok()) {
      VersionServedLocked(engine_->history().back(), "");
    } else {
      spdlog::error("{}", s.ToString());
    }
    cv_.notify_all();
  }
}

void FederationServiceImpl::BeginShutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutting_down_ = true;
  cv_.notify_all();
}

void FederationServiceImpl::LogSecureStageLocked() {
  if (!engine_->secure_aggregation()) return;
  const EngineStatus s = engine_->status();
  if (s.secure_rounds_aborted != secure_aborts_seen_) {
    secure_aborts_seen_ = s.secure_rounds_aborted;
    spdlog::warn("secure aggregation: the group of round {} aborted ({}); the round starts again", s.round,
                 s.last_secure_abort);
  }
  if (!s.secure_stage.empty() && s.secure_stage != secure_stage_seen_) {
    spdlog::info("secure aggregation: round {} at stage '{}' ({} clients in the group)", s.round, s.secure_stage,
                 s.round_selected);
  }
  secure_stage_seen_ = s.secure_stage;
}

EngineStatus FederationServiceImpl::StatusLocked() {
  EngineStatus s = engine_->status();
  evaluations_.FillStatus(&s);
  return s;
}

bool FederationServiceImpl::TakesCodecLocked(const std::string& client_id, const std::string& spec) const {
  if (spec.empty()) return false;
  auto it = client_codecs_.find(client_id);
  return it != client_codecs_.end() && it->second.count(CodecNameOf(spec)) > 0;
}

bool FederationServiceImpl::AnswerLocked(const std::string& client_id, const PollAnswer& a, v1::PollTaskReply* rep) {
  active_clients_.insert(client_id);
  if (a.kind == PollAnswer::Kind::kTask) {
    cv_.notify_all();  // this poll may have opened a round others are waiting for
    TaskToProto(a.task, clock_->NowMs(), rep->mutable_task());
    // Evaluation tasks measure the federation's model itself, so they download it in float32.
    if (!a.task.evaluate_only && TakesCodecLocked(client_id, info_.upload_codec)) {
      rep->mutable_task()->set_upload_codec(info_.upload_codec);
    }
    if (!a.task.evaluate_only && TakesCodecLocked(client_id, info_.download_codec)) {
      rep->mutable_task()->set_download_codec(info_.download_codec);
    }
    return true;
  }
  if (a.kind == PollAnswer::Kind::kFinished) {
    told_finished_.insert(client_id);
    rep->set_finished(true);
    return true;
  }
  return false;
}

Result<std::string> FederationServiceImpl::Identify(const grpc::ServerContext* ctx, const std::string& claimed) {
  std::string revoked;
  Result<std::string> who = identity_.Of(ctx, claimed, &revoked);
  if (!revoked.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (Status left = engine_->Leave(revoked); !left.ok()) spdlog::error("{}", left.ToString());
    cv_.notify_all();
  }
  return who;
}

grpc::Status FederationServiceImpl::Refuse(const char* call, const Status& s) {
  std::lock_guard<std::mutex> lock(mu_);
  return RefuseLocked(call, s);
}

grpc::Status FederationServiceImpl::RefuseLocked(const char* call, const Status& s) {
  spdlog::warn("refused {}: {}", call, s.ToString());
  ++refusals_[std::string(StatusCodeName(s.code()))];
  return ToGrpc(s);
}

Status FederationServiceImpl::RateLimited(const std::string& client) {
  if (rate_.Allow(client)) return Status::Ok();
  return ResourceExhaustedError(
      fmt::format("client '{}' is over the server's limit of {:g} requests per second; retry in {} ms", client,
                  limits_.requests_per_s, rate_.RetryAfterMs(client)));
}

std::shared_ptr<const ModelState> FederationServiceImpl::Snapshot(const std::string& base_sha256,
                                                                  std::optional<uint64_t>* held_version) {
  std::lock_guard<std::mutex> lock(mu_);
  if (held_version && !base_sha256.empty()) {
    const std::vector<RoundRecord>& history = engine_->history();
    for (auto r = history.rbegin(); r != history.rend() && !*held_version; ++r) {
      if (r->model_sha256 == base_sha256) *held_version = r->model_version;
    }
  }
  return engine_->model_snapshot();
}

FederationService::FederationService(Engine* engine, Store* store, ServerInfo info, bool mtls, const DoorLimits& limits,
                                     const Clock* clock)
    : impl_(std::make_unique<FederationServiceImpl>(engine, store, std::move(info), mtls, limits, clock)) {}
FederationService::~FederationService() = default;
grpc::Service* FederationService::service() { return impl_.get(); }
EngineStatus FederationService::status() { return impl_->status(); }
Status FederationService::WithEngine(const std::function<Status(Engine&)>& fn) { return impl_->WithEngine(fn); }
bool FederationService::WaitForEngine(const std::function<bool(Engine&)>& ready, int64_t max_wait_ms) {
  return impl_->WaitForEngine(ready, max_wait_ms);
}
ServerMetrics FederationService::metrics() { return impl_->metrics(); }
bool FederationService::AllClientsToldFinished() { return impl_->AllClientsToldFinished(); }
std::map<uint64_t, RoundRecord> FederationService::FederatedEvaluations() { return impl_->FederatedEvaluations(); }
void FederationService::Tick() { impl_->Tick(); }
void FederationService::RunCommits(const std::atomic<bool>& stop) { impl_->RunCommits(stop); }
void FederationService::BeginShutdown() { impl_->BeginShutdown(); }

}  // namespace plexus
