#include "server/rpc/federation_service.h"
#include "compression/codec.h"
#include "compression/coded_downloads.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/method_handler.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string_view>

#include "aggregators/simd_kernels.h"
#include "core/safetensors.h"
#include "proto/length_delimited_field.h"
#include "proto/secagg_wire.h"
#include "proto/shared_bytes_slice.h"
#include "server/rpc/caller_identity.h"
#include "server/rpc/evaluation_desk.h"
#include "server/rpc/model_downloads.h"
#include "server/rpc/partial_uploads.h"
#include "server/rpc/proto_conversion.h"
#include "server/rpc/rate_limiter.h"
#include "server/rpc/update_norm_gate.h"
#include "server/rpc/upload_places.h"
#include "server/rpc/upload_receiver.h"

namespace plexus {
namespace {

constexpr size_t kChunkBytes = 1 << 20;
// Versions aggregated but not yet committed, each a model held in memory, before uploads wait.
constexpr size_t kMaxPendingCommits = 2;
constexpr int64_t kMaxPollWaitMs = 30000;
// Where Federation.DownloadModel and UploadUpdate sit among the service's methods (the order of
// the rpc lines in federation.proto); the transfers' integration tests fail should they move.
constexpr int kDownloadModelMethod = 2;
constexpr int kUploadUpdateMethod = 3;
constexpr uint32_t kModelChunkDataField = 4;  // ModelChunk.data

// `how`: "" or e.g. " at its deadline".
void LogRoundClosed(const RoundRecord& r, std::string_view how) {
  spdlog::info("round {} closed{}: {} updates, {} dropped{}, version {}{}", r.round, how, r.num_updates, r.num_dropped,
               r.num_refused > 0 ? fmt::format(", {} refused", r.num_refused) : std::string(), r.model_version,
               r.test_accuracy ? fmt::format(", test accuracy {:.4f}", *r.test_accuracy) : std::string());
}

}  // namespace

class FederationServiceImpl final : public v1::Federation::Service {
 public:
  FederationServiceImpl(Engine* engine, Store* store, ServerInfo info, bool mtls, const DoorLimits& limits,
                        const Clock* clock)
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

  grpc::Status Join(grpc::ServerContext* ctx, const v1::JoinRequest* req, v1::JoinReply* rep) override {
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
    active_clients_.insert(*id);
    evaluations_.Declare(*id, req->num_examples());
    client_codecs_[*id] = std::set<std::string>(req->codecs().begin(), req->codecs().end());
    spdlog::info("client {} joined ({} examples, {})", *id, req->num_examples(), req->device());
    cv_.notify_all();
    return grpc::Status::OK;
  }

  // Long poll: waits (in real time, a retry interval at most between looks) until the engine has
  // an answer or the wait, measured on the injected clock, is over.
  grpc::Status PollTask(grpc::ServerContext* ctx, const v1::PollTaskRequest* req, v1::PollTaskReply* rep) override {
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

  // Federation.DownloadModel: each chunk goes out as its protobuf fields followed by a slice that
  // points into the encoded model and keeps it alive, so the model is not copied per download.
  grpc::Status DownloadModelRaw(grpc::ServerContext* ctx,
                                grpc::ServerSplitStreamer<v1::DownloadModelRequest, grpc::ByteBuffer>* stream) {
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
    Result<std::shared_ptr<const std::string>> bytes = InternalError("no model");
    if (req.codec().empty()) {
      bytes = downloads_->Float32(req.version(), Snapshot());
    } else {
      if (!downloads_->Serves(req.codec())) {
        return Refuse(
            "download",
            InvalidArgumentError("a coded download of model version " + std::to_string(req.version()) + " in '" +
                                 req.codec() + "': the server's download codec is '" + info_.download_codec + "'"));
      }
      std::optional<uint64_t> held_version;  // the published version whose hash the client named
      std::shared_ptr<const ModelState> current = Snapshot(req.base_sha256(), &held_version);
      Result<CodedDownloads::Download> coded =
          downloads_->Coded(req.version(), req.base_sha256(), current, held_version);
      if (!coded.ok()) return ToGrpc(coded.status());
      bytes = coded->bytes;
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
    const std::string& b = **bytes;
    if (req.offset() > b.size()) {
      return ToGrpc(OutOfRangeError("offset " + std::to_string(req.offset()) + " is past the " +
                                    std::to_string(b.size()) + "-byte model"));
    }
    for (size_t off = req.offset(); off < b.size() || (off == 0 && b.empty()); off += kChunkBytes) {
      if (ctx->IsCancelled()) return grpc::Status::CANCELLED;
      const size_t n = std::min(kChunkBytes, b.size() - off);
      fields.set_total_bytes(b.size());
      fields.set_offset(off);
      const std::string head = fields.SerializeAsString() + LengthDelimitedFieldHeader(kModelChunkDataField, n);
      grpc::Slice parts[2] = {grpc::Slice(head), SharedBytesSlice(*bytes, off, n)};
      grpc::ByteBuffer message(parts, 2);
      if (!stream->Write(message)) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "client went away");
      download_bytes_ += static_cast<int64_t>(n);
      if (b.empty()) break;
    }
    return grpc::Status::OK;
  }

  // Federation.UploadUpdate: the header is checked (identity, rate, size, a place), the payload
  // received and decoded with no lock held, weights turned into a delta and the norm taken, all
  // before mu_; under it, only the bounds, the engine's Submit and the reply.
  grpc::Status UploadUpdateRaw(grpc::ServerContext* ctx, grpc::ServerReader<grpc::ByteBuffer>* reader,
                               v1::UploadReply* rep) {
    UploadChunks chunks(reader);
    Result<UpdateChunkView> chunk = InvalidArgumentError("an upload must start with a header chunk");
    if (!chunks.Next(&chunk) || !chunk.ok() || !chunk->has_header) {
      return Refuse("upload",
                    chunk.ok() ? InvalidArgumentError("an upload must start with a header chunk") : chunk.status());
    }
    v1::UpdateHeader header;
    if (!header.ParseFromString(chunk->header)) {
      return Refuse("upload", InvalidArgumentError("malformed upload chunk: the header does not parse"));
    }
    Result<std::string> who = Identify(ctx, header.client_id());
    if (!who.ok()) return Refuse("upload", who.status());
    size_t limit;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (Status limited = RateLimited(header.client_id()); !limited.ok()) return RefuseLocked("upload", limited);
      // Before any byte is received or kept for a resume: a joined client's open task of its own.
      if (Status open = engine_->CheckOpenTask(header.client_id(), header.task_id()); !open.ok()) {
        return RefuseLocked("upload", open.WithContext("upload from " + header.client_id()));
      }
      limit = engine_->model().num_bytes() + (1 << 20);  // data plus a generous JSON header
      if (upload_codec_) limit = std::max(limit, upload_codec_->EncodedSize(*codec_layout_) + (1 << 20));
    }
    if (header.total_bytes() > limit) {
      return Refuse("upload",
                    ResourceExhaustedError("update of " + std::to_string(header.total_bytes()) +
                                           " bytes exceeds the limit of " + std::to_string(limit) + " for this model"));
    }
    if (header.encoding() != v1::ENCODING_DELTA_SAFETENSORS_F32 &&
        header.encoding() != v1::ENCODING_WEIGHTS_SAFETENSORS_F32 && header.encoding() != v1::ENCODING_DELTA_CODEC) {
      return Refuse("upload", InvalidArgumentError("unknown update encoding " + std::to_string(header.encoding())));
    }
    const bool coded = header.encoding() == v1::ENCODING_DELTA_CODEC;
    // Fold and store the codes, never a float32 copy (int8, top-k, fp16, bf16 into FedAvg & co).
    bool keep_coded = false;
    if (coded) {
      std::lock_guard<std::mutex> lock(mu_);
      // A server without an upload codec names none in its tasks: the check comes before any use of it.
      if (!upload_codec_ || !TakesCodecLocked(header.client_id(), info_.upload_codec) ||
          header.codec() != info_.upload_codec) {
        return RefuseLocked("upload", InvalidArgumentError("update of task " + header.task_id() + " in codec '" +
                                                           header.codec() + "', which its task did not name"));
      }
      keep_coded = upload_codec_->has_coded_form() && engine_->folds_coded();
      if (header.offset() > 0) {  // only float32 uploads are kept for a resume
        return RefuseLocked("upload", FailedPreconditionError("a compressed update cannot resume: upload from byte 0"));
      }
    }
    // Held until the update is submitted or refused: the places bound how many decoded updates
    // the server holds at once.
    const int64_t started_ms = clock_->NowMs();
    const UploadCall call{ctx->peer(), [ctx] { ctx->TryCancel(); }};
    UploadPlaces::Place place(&places_, &call, *who);
    if (!place.status().ok()) return Refuse("upload", place.status());
    Result<ReceivedUpload> received =
        coded ? ReceiveCodedUpload(chunks, header, *upload_codec_, *codec_layout_, keep_coded, &place)
              : ReceiveUpload(chunks, header, &partial_, &place);
    if (!received.ok()) return Refuse("upload", received.status());
    place.Received();
    Update u = UpdateFromHeader(header, std::move(received->values));
    u.coded = std::move(received->coded);
    if (header.encoding() == v1::ENCODING_WEIGHTS_SAFETENSORS_F32) {
      // Weights become a delta against the task's base version (read from its checkpoint), not
      // against whatever the model is now: in async mode versions move on while a client trains.
      Result<ModelState> base = store_->Checkpoint(header.base_version());
      if (!base.ok()) {
        return Refuse("upload", FailedPreconditionError("weights for task " + header.task_id() +
                                                        " start from version " + std::to_string(header.base_version()) +
                                                        ", which this server cannot read: " + base.status().message()));
      }
      Status layout = u.delta.CheckSameLayout(*base);
      if (!layout.ok()) return RefuseContent(header, layout.WithContext("update for task " + header.task_id()));
      u.delta.Subtract(*base);
    }
    Result<double> norm = norm_gate_.Measure(u, header.task_id());
    if (!norm.ok()) return RefuseContent(header, norm.status());

    std::unique_lock<std::mutex> lock(mu_);
    if (received->resumed) {
      ++uploads_resumed_;
      upload_bytes_resumed_ += static_cast<int64_t>(received->resumed_from);
    }
    // An update sent again because its acknowledgement was lost was checked when it was taken:
    // the bound may have moved since, and refusing it now would deny work already merged.
    if (!engine_->Acknowledged(header.client_id(), header.task_id())) {
      const Status within = norm_gate_.Admit(header.client_id(), header.task_id(), *norm, engine_->model());
      if (!within.ok()) return RefuseContentLocked(header, within);
    }
    // Commits the engine left to the committer hold a model each: wait while there are too many.
    cv_.wait(lock, [this] { return engine_->commits_pending() < kMaxPendingCommits || shutting_down_; });
    const uint64_t version_before = engine_->model().version();
    Status s = engine_->Submit(std::move(u));
    if (!s.ok() && s.code() == StatusCode::kInvalidArgument) {
      return RefuseContentLocked(header, s.WithContext("update from " + header.client_id()));
    }
    if (!s.ok()) return RefuseLocked("upload", s.WithContext("update from " + header.client_id()));
    upload_metrics_.CountUpload(header.total_bytes(), static_cast<double>(clock_->NowMs() - started_ms) / 1000.0);
    rep->set_accepted_for_version(version_before);
    if (engine_->model().version() != version_before) LogRoundClosed(engine_->history().back(), "");
    if (header.want_next_task()) {
      // What a poll would answer at once; "wait" is left to the client's next (long) poll. A
      // failed poll does not undo the accepted update: the client polls and hears the error.
      Result<PollAnswer> next = evaluations_.Poll(header.client_id());
      if (next.ok() && !AnswerLocked(header.client_id(), *next, rep->mutable_next())) rep->clear_next();
    }
    cv_.notify_all();
    return grpc::Status::OK;
  }

  // Refuses an upload for what it holds (a bound, values, layout): its client does not train a
  // refused task again, so the engine stops waiting for it (a sync round samples another client
  // or closes with what it has) instead of holding the round until its deadline.
  grpc::Status RefuseContent(const v1::UpdateHeader& header, const Status& why) {
    std::lock_guard<std::mutex> lock(mu_);
    return RefuseContentLocked(header, why);
  }
  grpc::Status RefuseContentLocked(const v1::UpdateHeader& header, const Status& why) {
    const uint64_t before = engine_->model().version();
    if (Status s = engine_->Refused(header.client_id(), header.task_id()); !s.ok()) {
      spdlog::error("after refusing task {}: {}", header.task_id(), s.ToString());
    }
    if (engine_->model().version() != before) LogRoundClosed(engine_->history().back(), " after a refusal");
    cv_.notify_all();
    return RefuseLocked("upload", why);
  }

  grpc::Status UploadStatus(grpc::ServerContext* ctx, const v1::UploadStatusRequest* req,
                            v1::UploadStatusReply* rep) override {
    Result<std::string> who = Identify(ctx, req->client_id());
    if (!who.ok()) return Refuse("upload status", who.status());
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (Status limited = RateLimited(req->client_id()); !limited.ok()) return RefuseLocked("upload status", limited);
    }
    rep->set_received_bytes(partial_.HeldBytes(req->client_id(), req->task_id(), req->total_bytes()));
    return grpc::Status::OK;
  }

  grpc::Status ReportEvaluation(grpc::ServerContext* ctx, const v1::EvaluationReport* req,
                                v1::EvaluationAck*) override {
    Result<std::string> who = Identify(ctx, req->client_id());
    if (!who.ok()) return Refuse("evaluation report", who.status());
    std::lock_guard<std::mutex> lock(mu_);
    if (Status limited = RateLimited(*who); !limited.ok()) return RefuseLocked("evaluation report", limited);
    Evaluation e;
    e.loss = req->loss();
    e.accuracy = req->accuracy();
    e.examples = req->examples();
    if (Status s = evaluations_.Report(*who, req->task_id(), e); !s.ok()) return RefuseLocked("evaluation report", s);
    cv_.notify_all();
    return grpc::Status::OK;
  }

  grpc::Status SecureAggregation(grpc::ServerContext* ctx, const v1::SecAggRequest* req,
                                 v1::SecAggReply* rep) override {
    Result<std::string> who = Identify(ctx, req->client_id());
    if (!who.ok()) return Refuse("secure aggregation", who.status());
    Result<secagg::Call> call = SecAggCallFromProto(*req);
    if (!call.ok()) return Refuse("secure aggregation", call.status());
    std::lock_guard<std::mutex> lock(mu_);
    if (Status limited = RateLimited(*who); !limited.ok()) return RefuseLocked("secure aggregation", limited);
    const uint64_t before = engine_->model().version();
    Result<secagg::View> view = engine_->SecureAggregation(*who, req->task_id(), *call);
    // Members ask many times a second: the engine's status (a pass over every client) is read only
    // when a call saw the group at another stage than the last one did.
    if (view.ok() && static_cast<int>(view->stage) != last_view_stage_) {
      last_view_stage_ = static_cast<int>(view->stage);
      LogSecureStageLocked();
    }
    if (engine_->model().version() != before) LogRoundClosed(engine_->history().back(), "");
    cv_.notify_all();  // a stage or the round may have closed: polls may answer differently
    if (!view.ok()) return RefuseLocked("secure aggregation", view.status().WithContext("client " + *who));
    SecAggViewToProto(*view, rep);
    return grpc::Status::OK;
  }

  grpc::Status GetStatus(grpc::ServerContext* ctx, const v1::StatusRequest*, v1::StatusReply* rep) override {
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

  EngineStatus status() {
    std::lock_guard<std::mutex> lock(mu_);
    return StatusLocked();
  }

  std::map<uint64_t, RoundRecord> FederatedEvaluations() {
    std::lock_guard<std::mutex> lock(mu_);
    evaluations_.Update();
    return evaluations_.results();
  }

  ServerMetrics metrics() {
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

  bool AllClientsToldFinished() {
    std::lock_guard<std::mutex> lock(mu_);
    evaluations_.Update();
    if (evaluations_.final_pending()) return false;
    for (const std::string& id : active_clients_) {
      if (!told_finished_.count(id)) return false;
    }
    return true;
  }

  void Tick() {
    places_.CancelStalled();
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t before = engine_->model().version();
    Status s = engine_->Tick();
    if (!s.ok()) spdlog::error("{}", s.ToString());
    if (engine_->model().version() != before) LogRoundClosed(engine_->history().back(), " at its deadline");
    LogSecureStageLocked();
    cv_.notify_all();
  }

  void RunCommits(const std::atomic<bool>& stop) {
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
        LogRoundClosed(engine_->history().back(), "");
      } else {
        spdlog::error("{}", s.ToString());
      }
      cv_.notify_all();
    }
  }

  void BeginShutdown() {
    std::lock_guard<std::mutex> lock(mu_);
    shutting_down_ = true;
    cv_.notify_all();
  }

 private:
  // Says when the open secure group moved to another stage or a group aborted. Requires mu_.
  void LogSecureStageLocked() {
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

  EngineStatus StatusLocked() {
    EngineStatus s = engine_->status();
    evaluations_.FillStatus(&s);
    return s;
  }

  // Whether the client's tasks name the server's codec `spec`: there is one, and the client
  // advertised it when it joined (to this process: after a restart, until it joins again, float32).
  bool TakesCodecLocked(const std::string& client_id, const std::string& spec) const {
    if (spec.empty()) return false;
    auto it = client_codecs_.find(client_id);
    return it != client_codecs_.end() && it->second.count(CodecNameOf(spec)) > 0;
  }

  // Fills `rep` with a task or "finished" and returns true; false (nothing filled) for "wait".
  bool AnswerLocked(const std::string& client_id, const PollAnswer& a, v1::PollTaskReply* rep) {
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

  // The caller's identity (CallerIdentity::Of). A revoked caller is refused, and the engine lets
  // go of it: its open task goes to another client, and it no longer counts as connected. Takes mu_.
  Result<std::string> Identify(const grpc::ServerContext* ctx, const std::string& claimed) {
    std::string revoked;
    Result<std::string> who = identity_.Of(ctx, claimed, &revoked);
    if (!revoked.empty()) {
      std::lock_guard<std::mutex> lock(mu_);
      if (Status left = engine_->Leave(revoked); !left.ok()) spdlog::error("{}", left.ToString());
      cv_.notify_all();
    }
    return who;
  }

  // Logs and counts a refusal; RefuseLocked when mu_ is already held.
  grpc::Status Refuse(const char* call, const Status& s) {
    std::lock_guard<std::mutex> lock(mu_);
    return RefuseLocked(call, s);
  }
  grpc::Status RefuseLocked(const char* call, const Status& s) {
    spdlog::warn("refused {}: {}", call, s.ToString());
    ++refusals_[std::string(StatusCodeName(s.code()))];
    return ToGrpc(s);
  }

  // ResourceExhausted when `client` is over its request rate. Requires mu_.
  Status RateLimited(const std::string& client) {
    if (rate_.Allow(client)) return Status::Ok();
    return ResourceExhaustedError(
        fmt::format("client '{}' is over the server's limit of {:g} requests per second; retry in {} ms", client,
                    limits_.requests_per_s, rate_.RetryAfterMs(client)));
  }

  // The engine's model now (immutable: downloads encode it without mu_) and, for a client that
  // named the hash of the model it holds, the published version with that hash.
  std::shared_ptr<const ModelState> Snapshot(const std::string& base_sha256 = "",
                                             std::optional<uint64_t>* held_version = nullptr) {
    std::lock_guard<std::mutex> lock(mu_);
    if (held_version && !base_sha256.empty()) {
      const std::vector<RoundRecord>& history = engine_->history();
      for (auto r = history.rbegin(); r != history.rend() && !*held_version; ++r) {
        if (r->model_sha256 == base_sha256) *held_version = r->model_version;
      }
    }
    return engine_->model_snapshot();
  }

  Engine* const engine_;
  Store* const store_;
  const ServerInfo info_;
  const DoorLimits limits_;
  const Clock* const clock_;
  const CallerIdentity identity_;
  int64_t secure_aborts_seen_ = 0;  // guarded by mu_, as the next two
  std::string secure_stage_seen_;
  int last_view_stage_ = -1;  // the stage the last SecureAggregation answer showed
  PartialUploads partial_;
  UploadPlaces places_;

  std::mutex mu_;
  std::condition_variable cv_;
  RateLimiter rate_;                         // guarded by mu_
  UpdateNormGate norm_gate_;                 // Admit guarded by mu_; Measure without it
  std::map<std::string, int64_t> refusals_;  // guarded by mu_; by status code name
  int open_polls_ = 0;                       // guarded by mu_; PollTask calls in progress
  int64_t uploads_resumed_ = 0;              // guarded by mu_
  int64_t upload_bytes_resumed_ = 0;         // guarded by mu_
  ServerMetrics upload_metrics_;             // guarded by mu_; the upload counters
  std::atomic<int64_t> download_bytes_{0};
  bool shutting_down_ = false;                                  // guarded by mu_
  std::set<std::string> active_clients_;                        // guarded by mu_; clients seen by this process
  std::set<std::string> told_finished_;                         // guarded by mu_
  std::map<std::string, std::set<std::string>> client_codecs_;  // guarded by mu_; advertised at join
  std::unique_ptr<Codec> upload_codec_;                         // null: float32 uploads only
  std::optional<ModelState> codec_layout_;     // the model's layout (values unset), for decoding coded updates
  EvaluationDesk evaluations_;                 // guarded by mu_
  std::unique_ptr<ModelDownloads> downloads_;  // taken without mu_
};

FederationService::FederationService(Engine* engine, Store* store, ServerInfo info, bool mtls, const DoorLimits& limits,
                                     const Clock* clock)
    : impl_(std::make_unique<FederationServiceImpl>(engine, store, std::move(info), mtls, limits, clock)) {}
FederationService::~FederationService() = default;
grpc::Service* FederationService::service() { return impl_.get(); }
EngineStatus FederationService::status() { return impl_->status(); }
ServerMetrics FederationService::metrics() { return impl_->metrics(); }
bool FederationService::AllClientsToldFinished() { return impl_->AllClientsToldFinished(); }
std::map<uint64_t, RoundRecord> FederationService::FederatedEvaluations() { return impl_->FederatedEvaluations(); }
void FederationService::Tick() { impl_->Tick(); }
void FederationService::RunCommits(const std::atomic<bool>& stop) { impl_->RunCommits(stop); }
void FederationService::BeginShutdown() { impl_->BeginShutdown(); }

}  // namespace plexus
