#include "server/rpc/federation_server.h"

#include "server/rpc/adaptive_norm_bound.h"

#include <grpcpp/grpcpp.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>
#include <grpcpp/support/method_handler.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string_view>
#include <limits>
#include <thread>

#include "aggregators/simd_kernels.h"
#include "core/clock.h"
#include "core/safetensors.h"
#include "server/rpc/rate_limiter.h"
#include "server/rpc/update_chunk_wire.h"
#include "plexus/v1/federation.grpc.pb.h"
#include "proto/abseil_deadlock_detection.h"
#include "proto/length_delimited_field.h"
#include "proto/shared_bytes_slice.h"

namespace plexus {
namespace {

constexpr size_t kChunkBytes = 1 << 20;
constexpr int kMaxMessageBytes = 4 << 20;
// Versions aggregated but not yet committed, each a model held in memory, before uploads wait.
constexpr size_t kMaxPendingCommits = 2;
constexpr int64_t kMaxPollWaitMs = 30000;
// Threads of gRPC's synchronous server that, having finished an RPC, wait for the next one
// instead of exiting. gRPC keeps 2 by default: with a dozen clients polling and uploading, it then
// started and ended a thread for most RPCs, each new thread faulting its stack back in.
constexpr int kIdleServerThreads = 64;

// Why gRPC could not listen on HOST:PORT, found by binding it once more with a plain socket (gRPC
// itself only logs it), with what to do about it.
std::string WhyCannotListen(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  std::string host = colon == std::string::npos ? listen : listen.substr(0, colon);
  const std::string port = colon == std::string::npos ? "" : listen.substr(colon + 1);
  if (host.size() > 1 && host.front() == '[') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (port.empty() || getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found) != 0) {
    return "not a HOST:PORT address (e.g. --listen 127.0.0.1:50051)";
  }
  std::string why = "the address is invalid";
  for (addrinfo* a = found; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    const int bound = ::bind(fd, a->ai_addr, a->ai_addrlen);
    const int err = errno;
    ::close(fd);
    if (bound == 0) continue;
    if (err == EADDRINUSE) {
      why = "port " + port + " is already in use (another plexus server?): stop it, or choose another port with --listen HOST:PORT";
    } else if (err == EADDRNOTAVAIL) {
      why = host + " is not an address of this machine (--listen 0.0.0.0:" + port + " listens on all of them)";
    } else if (err == EACCES) {
      why = "ports below 1024 need root: choose another with --listen HOST:PORT";
    } else {
      why = std::strerror(err);
    }
    break;
  }
  freeaddrinfo(found);
  return why;
}

grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(static_cast<int>(s.code())), s.message());
}

// Where Federation.DownloadModel and UploadUpdate sit among the service's methods (the order of
// the rpc lines in federation.proto); the transfers' integration tests fail should they move.
constexpr int kDownloadModelMethod = 2;
constexpr int kUploadUpdateMethod = 3;
constexpr uint32_t kModelChunkDataField = 4;  // ModelChunk.data

// An upload's chunks as they come off the stream, each read in place from gRPC's buffers
// (update_chunk_wire.h). A chunk's data views stay valid until the next call to Next.
class UploadChunks {
 public:
  explicit UploadChunks(grpc::ServerReader<grpc::ByteBuffer>* reader) : reader_(reader) {}

  // False at the end of the stream; otherwise sets *chunk to the next chunk or to the reason it
  // is malformed.
  bool Next(Result<UpdateChunkView>* chunk) {
    buffer_.Clear();
    slices_.clear();
    if (!reader_->Read(&buffer_)) return false;
    if (!buffer_.Dump(&slices_).ok()) {
      *chunk = InvalidArgumentError("malformed upload chunk: its bytes cannot be read");
      return true;
    }
    views_.clear();
    for (const grpc::Slice& s : slices_) views_.emplace_back(reinterpret_cast<const char*>(s.begin()), s.size());
    *chunk = ParseUpdateChunk(views_);
    return true;
  }

 private:
  grpc::ServerReader<grpc::ByteBuffer>* reader_;
  grpc::ByteBuffer buffer_;
  std::vector<grpc::Slice> slices_;
  std::vector<std::string_view> views_;
};

class FederationService final : public v1::Federation::Service {
 public:
  FederationService(Engine* engine, Store* store, ServerInfo info, bool mtls, const DoorLimits& limits)
      : engine_(engine),
        store_(store),
        info_(std::move(info)),
        mtls_(mtls),
        limits_(limits),
        rate_(limits.requests_per_s, limits.burst, &clock_),
        adaptive_bound_(limits.adaptive_norm_factor) {
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
    MarkMethodStreamed(kUploadUpdateMethod,
                       new grpc::internal::ClientStreamingHandler<FederationService, grpc::ByteBuffer, v1::UploadReply>(
                           [](FederationService* s, grpc::ServerContext* ctx,
                              grpc::ServerReader<grpc::ByteBuffer>* reader,
                              v1::UploadReply* rep) { return s->UploadUpdateRaw(ctx, reader, rep); },
                           this));
  }

  grpc::Status Join(grpc::ServerContext* ctx, const v1::JoinRequest* req, v1::JoinReply* rep) override {
    Result<std::string> claimed = Identity(ctx, req->client_id());
    if (!claimed.ok()) return Refuse("join", claimed.status());
    std::lock_guard<std::mutex> lock(mu_);
    if (Status limited = RateLimited(*claimed); !limited.ok()) return RefuseLocked("join", limited);
    Result<std::string> id = engine_->Join({*claimed, req->num_examples(), req->device()});
    if (!id.ok()) return RefuseLocked("join", id.status());
    rep->set_client_id(*id);
    rep->set_model_name(info_.model_name);
    active_clients_.insert(*id);
    spdlog::info("client {} joined ({} examples, {})", *id, req->num_examples(), req->device());
    cv_.notify_all();
    return grpc::Status::OK;
  }

  grpc::Status PollTask(grpc::ServerContext* ctx, const v1::PollTaskRequest* req, v1::PollTaskReply* rep) override {
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(std::min<int64_t>(req->wait_ms(), kMaxPollWaitMs));
    Result<std::string> who = Identity(ctx, req->client_id());
    if (!who.ok()) return Refuse("poll", who.status());
    std::unique_lock<std::mutex> lock(mu_);
    if (Status limited = RateLimited(req->client_id()); !limited.ok()) return RefuseLocked("poll", limited);
    while (true) {
      Result<PollAnswer> a = engine_->Poll(req->client_id());
      if (!a.ok()) return RefuseLocked("poll", a.status());
      if (AnswerLocked(req->client_id(), *a, rep)) return grpc::Status::OK;
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline || ctx->IsCancelled() || shutting_down_) {
        rep->set_retry_after_ms(static_cast<uint32_t>(std::min<int64_t>(a->retry_after_ms, 1000)));
        return grpc::Status::OK;
      }
      cv_.wait_until(lock, std::min(deadline, now + std::chrono::milliseconds(a->retry_after_ms)));
    }
  }

  // `how`: "" or e.g. " at its deadline".
  static void LogRoundClosed(const RoundRecord& r, std::string_view how) {
    spdlog::info("round {} closed{}: {} updates, {} dropped, version {}{}", r.round, how, r.num_updates,
                 r.num_dropped, r.model_version,
                 r.test_accuracy ? fmt::format(", test accuracy {:.4f}", *r.test_accuracy) : std::string());
  }

  // Fills `rep` with a task or "finished" and returns true; false (nothing filled) for "wait".
  bool AnswerLocked(const std::string& client_id, const PollAnswer& a, v1::PollTaskReply* rep) {
    active_clients_.insert(client_id);
    if (a.kind == PollAnswer::Kind::kTask) {
      cv_.notify_all();  // this poll may have opened a round others are waiting for
      const Task& t = a.task;
      v1::TrainingTask* out = rep->mutable_task();
      out->set_task_id(t.task_id);
      out->set_round(t.round);
      out->set_model_version(t.model_version);
      out->set_model_sha256(t.model_sha256);
      out->set_local_epochs(t.hyperparams.local_epochs);
      out->set_local_steps(t.hyperparams.local_steps);
      out->set_batch_size(t.hyperparams.batch_size);
      out->set_learning_rate(t.hyperparams.learning_rate);
      out->set_momentum(t.hyperparams.momentum);
      out->set_deadline_in_ms(t.deadline_ms - clock_.NowMs());
      return true;
    }
    if (a.kind == PollAnswer::Kind::kFinished) {
      told_finished_.insert(client_id);
      rep->set_finished(true);
      return true;
    }
    return false;
  }

  // Federation.DownloadModel: each chunk goes out as its protobuf fields followed by a slice that
  // points into the encoded model and keeps it alive, so the model is not copied per download.
  grpc::Status DownloadModelRaw(grpc::ServerContext* ctx,
                                grpc::ServerSplitStreamer<v1::DownloadModelRequest, grpc::ByteBuffer>* stream) {
    v1::DownloadModelRequest req;
    if (!stream->Read(&req)) return Refuse("download", InvalidArgumentError("a download needs its request"));
    // The model is the federation's work: only a proven, unrevoked caller within its rate gets it.
    Result<std::string> who = Identity(ctx, req.client_id());
    if (!who.ok()) return Refuse("download", who.status());
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (Status limited = RateLimited(*who); !limited.ok()) return RefuseLocked("download", limited);
    }
    Result<std::shared_ptr<const std::string>> bytes = EncodedModel(req.version());
    if (!bytes.ok()) return ToGrpc(bytes.status());
    const std::string& b = **bytes;
    if (req.offset() > b.size()) {
      return ToGrpc(Status(StatusCode::kOutOfRange, "offset " + std::to_string(req.offset()) + " is past the " +
                                                        std::to_string(b.size()) + "-byte model"));
    }
    for (size_t off = req.offset(); off < b.size() || (off == 0 && b.empty()); off += kChunkBytes) {
      if (ctx->IsCancelled()) return grpc::Status::CANCELLED;
      const size_t n = std::min(kChunkBytes, b.size() - off);
      v1::ModelChunk fields;  // all but data, which follows
      fields.set_version(req.version());
      fields.set_total_bytes(b.size());
      fields.set_offset(off);
      const std::string head = fields.SerializeAsString() + LengthDelimitedFieldHeader(kModelChunkDataField, n);
      grpc::Slice parts[2] = {grpc::Slice(head), SharedBytesSlice(*bytes, off, n)};
      grpc::ByteBuffer message(parts, 2);
      if (!stream->Write(message)) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "client went away");
      if (b.empty()) break;
    }
    return grpc::Status::OK;
  }

  // Federation.UploadUpdate: the chunks arrive as gRPC's buffers and their data goes from there
  // into the decoder (no protobuf copy of the update).
  grpc::Status UploadUpdateRaw(grpc::ServerContext* ctx, grpc::ServerReader<grpc::ByteBuffer>* reader,
                               v1::UploadReply* rep) {
    UploadChunks chunks(reader);
    Result<UpdateChunkView> chunk = InvalidArgumentError("an upload must start with a header chunk");
    if (!chunks.Next(&chunk) || !chunk.ok() || !chunk->has_header) {
      return Refuse("upload", chunk.ok() ? InvalidArgumentError("an upload must start with a header chunk")
                                         : chunk.status());
    }
    v1::UpdateHeader header;
    if (!header.ParseFromString(chunk->header)) {
      return Refuse("upload", InvalidArgumentError("malformed upload chunk: the header does not parse"));
    }
    Result<std::string> who = Identity(ctx, header.client_id());
    if (!who.ok()) return Refuse("upload", who.status());
    size_t limit;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (Status limited = RateLimited(header.client_id()); !limited.ok()) return RefuseLocked("upload", limited);
      limit = engine_->model().num_bytes() + (1 << 20);  // data plus a generous JSON header
    }
    if (header.total_bytes() > limit) {
      return Refuse("upload", ResourceExhaustedError("update of " + std::to_string(header.total_bytes()) +
                                           " bytes exceeds the limit of " + std::to_string(limit) + " for this model"));
    }
    UploadSlot slot(this, ctx, *who);
    if (!slot.status().ok()) return Refuse("upload", slot.status());
    // Each chunk goes straight into the decoded model: the update is held once while it arrives.
    std::optional<SafetensorsStreamDecoder> stream;
    const uint64_t offset = header.offset();
    if (offset > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      stream = TakePartialLocked(header.client_id(), header.task_id(), header.total_bytes());
      if (!stream || stream->received() != offset || header.payload_sha256().empty()) {
        return RefuseLocked("upload", FailedPreconditionError(
                                          "nothing to resume at byte " + std::to_string(offset) + " of task " +
                                          header.task_id() + " (the server holds " +
                                          std::to_string(stream ? stream->received() : 0) +
                                          " bytes; a resume also needs payload_sha256): upload from byte 0"));
      }
    } else {
      stream.emplace(header.total_bytes());
    }
    while (chunks.Next(&chunk)) {
      slot.Progress();
      if (!chunk.ok()) return Refuse("upload", chunk.status());
      if (chunk->has_header) return Refuse("upload", InvalidArgumentError("a second header chunk"));
      if (stream->received() + chunk->data_bytes > header.total_bytes()) {
        return Refuse("upload", InvalidArgumentError("update carries more bytes than its header announces"));
      }
      for (std::string_view piece : chunk->data) {
        if (Status s = stream->Append(piece); !s.ok()) {
          return Refuse("upload", s.WithContext("update for task " + header.task_id()));
        }
      }
    }
    if (stream->received() != header.total_bytes()) {
      // A dropped link or a client that stopped early: keep what came, so that it resumes.
      const std::string received = std::to_string(stream->received());
      std::lock_guard<std::mutex> lock(mu_);
      KeepPartialLocked(header.client_id(), header.task_id(), header.total_bytes(), std::move(*stream));
      return RefuseLocked("upload", InvalidArgumentError("update ended after " + received + " of " +
                                                          std::to_string(header.total_bytes()) +
                                                          " bytes (kept: resume from byte " + received + ")"));
    }
    if (offset > 0) {
      if (stream->ReceivedSha256() != header.payload_sha256()) {
        return Refuse("upload", Status(StatusCode::kAborted, "the resumed update of task " + header.task_id() +
                                                                 " does not match its SHA-256: upload from byte 0"));
      }
      std::lock_guard<std::mutex> lock(mu_);
      ++uploads_resumed_;
    }
    Result<ModelState> decoded = std::move(*stream).Finish();
    if (!decoded.ok()) return Refuse("upload", decoded.status().WithContext("update for task " + header.task_id()));

    Update u;
    u.client_id = header.client_id();
    u.task_id = header.task_id();
    u.base_version = header.base_version();
    u.num_examples = header.num_examples();
    u.local_steps = header.local_steps();
    for (const auto& [k, v] : header.metrics()) u.metrics[k] = v;
    std::unique_lock<std::mutex> lock(mu_);
    u.delta = std::move(decoded).value();
    if (header.encoding() == v1::ENCODING_WEIGHTS_SAFETENSORS_F32) {
      // Weights become a delta against the task's base version, not whatever the model is now
      // (in async mode versions move on while a client trains).
      std::optional<ModelState> older;
      if (header.base_version() != engine_->model().version()) {
        lock.unlock();  // a checkpoint file is read: not under the lock every call takes
        Result<ModelState> base = store_->Checkpoint(header.base_version());
        lock.lock();
        if (!base.ok()) {
          return RefuseLocked("upload", FailedPreconditionError("weights for task " + header.task_id() +
                                                                " start from version " +
                                                                std::to_string(header.base_version()) +
                                                                ", which this server cannot read: " +
                                                                base.status().message()));
        }
        older = std::move(base).value();
      }
      const ModelState& base = older ? *older : engine_->model();
      Status layout = u.delta.CheckSameLayout(base);
      if (!layout.ok()) return RefuseLocked("upload", layout.WithContext("update for task " + header.task_id()));
      u.delta.Subtract(base);
    } else if (header.encoding() != v1::ENCODING_DELTA_SAFETENSORS_F32) {
      return RefuseLocked("upload", InvalidArgumentError("unknown update encoding " + std::to_string(header.encoding())));
    }
    double norm = std::numeric_limits<double>::quiet_NaN();
    if (limits_.max_update_norm > 0 || adaptive_bound_.enabled()) {
      // A NaN norm is left to the engine, which names the tensor and index.
      norm = std::sqrt(simd::SquaredNorm(u.delta.data().data(), u.delta.num_params()));
      if (std::isfinite(norm) && limits_.max_update_norm > 0 && norm > limits_.max_update_norm) {
        return RefuseLocked("upload", InvalidArgumentError(fmt::format(
                                          "update for task {} has L2 norm {:g}, above the server's bound of {:g} "
                                          "(--max-update-norm)",
                                          header.task_id(), norm, limits_.max_update_norm)));
      }
      const double adaptive = adaptive_bound_.Bound(ModelNormLocked());
      if (std::isfinite(norm) && norm > adaptive) {
        return RefuseLocked("upload", InvalidArgumentError(fmt::format(
                                          "update for task {} has L2 norm {:g}, above {:g} ({:g} times the median of "
                                          "recent updates or, before there are any, of the model's norm; "
                                          "--adaptive-norm-factor)",
                                          header.task_id(), norm, adaptive, limits_.adaptive_norm_factor)));
      }
    }
    // Commits the engine left to the committer hold a model each: wait while there are too many.
    cv_.wait(lock, [this] { return engine_->commits_pending() < kMaxPendingCommits || shutting_down_; });
    const uint64_t version_before = engine_->model().version();
    Status s = engine_->Submit(std::move(u));
    if (!s.ok()) return RefuseLocked("upload", s.WithContext("update from " + header.client_id()));
    adaptive_bound_.Accepted(norm);
    rep->set_accepted_for_version(version_before);
    if (engine_->model().version() != version_before) LogRoundClosed(engine_->history().back(), "");
    if (header.want_next_task()) {
      // What a poll would answer at once; "wait" is left to the client's next (long) poll. A
      // failed poll does not undo the accepted update: the client polls and hears the error.
      Result<PollAnswer> next = engine_->Poll(header.client_id());
      if (next.ok() && !AnswerLocked(header.client_id(), *next, rep->mutable_next())) rep->clear_next();
    }
    cv_.notify_all();
    return grpc::Status::OK;
  }

  grpc::Status UploadStatus(grpc::ServerContext* ctx, const v1::UploadStatusRequest* req,
                            v1::UploadStatusReply* rep) override {
    Result<std::string> who = Identity(ctx, req->client_id());
    if (!who.ok()) return Refuse("upload status", who.status());
    std::lock_guard<std::mutex> lock(mu_);
    if (Status limited = RateLimited(req->client_id()); !limited.ok()) return RefuseLocked("upload status", limited);
    auto it = partial_.find(req->client_id());
    const bool same = it != partial_.end() && it->second.task_id == req->task_id() &&
                      it->second.total_bytes == req->total_bytes();
    rep->set_received_bytes(same ? it->second.stream.received() : 0);
    return grpc::Status::OK;
  }

  grpc::Status GetStatus(grpc::ServerContext* ctx, const v1::StatusRequest*, v1::StatusReply* rep) override {
    // With tokens or mutual TLS the status (client and task ids) is for proven callers only,
    // unless the operator opened it (--public-status); with admins, for them only.
    if (!limits_.admins.empty() || ((mtls_ || limits_.tokens) && !limits_.public_status)) {
      Result<std::string> who = Identity(ctx, "");
      if (!who.ok()) return Refuse("status", who.status());
    }
    if (!limits_.admins.empty()) {
      Result<std::string> who = Identity(ctx, "");
      if (!who.ok()) return Refuse("status", who.status());
      if (!limits_.admins.count(*who)) {
        return Refuse("status", Status(StatusCode::kPermissionDenied,
                                       "the status is for this server's admins; '" + *who + "' is not one"));
      }
    }
    const EngineStatus s = status();
    rep->set_mode(s.mode);
    rep->set_round(s.round);
    rep->set_model_version(s.model_version);
    rep->set_known_clients(s.known_clients);
    rep->set_connected_clients(s.connected_clients);
    rep->set_round_selected(s.round_selected);
    rep->set_round_received(s.round_received);
    rep->set_updates_accepted(s.updates_accepted);
    rep->set_updates_refused(s.updates_refused);
    rep->set_updates_stale(s.updates_stale);
    rep->set_has_accuracy(s.last_accuracy.has_value());
    rep->set_last_accuracy(s.last_accuracy.value_or(0.0));
    rep->set_finished(s.finished);
    rep->set_model_name(info_.model_name);
    rep->set_rounds_total(info_.rounds_total);
    rep->set_error(s.error);
    for (const ClientSchedule& c : s.schedule) {
      v1::ClientSchedule* out = rep->add_schedule();
      out->set_client_id(c.client_id);
      out->set_has_speed(c.ms_per_step.has_value());
      out->set_ms_per_step(c.ms_per_step.value_or(0.0));
      out->set_local_steps(c.local_steps);
      out->set_group(c.group);
    }
    std::lock_guard<std::mutex> lock(mu_);
    rep->set_strategy(engine_->strategy_description());
    for (const auto& [code, count] : refusals_) (*rep->mutable_refusals())[code] = count;
    rep->set_uploads_resumed(uploads_resumed_);
    if (!engine_->history().empty()) {
      for (const MergedUpdate& m : engine_->history().back().merged) {
        v1::MergedUpdate* out = rep->add_last_merged();
        out->set_client_id(m.client_id);
        out->set_task_id(m.task_id);
        out->set_staleness(m.staleness);
        out->set_group(m.group);
        out->set_has_speed(m.ms_per_step.has_value());
        out->set_ms_per_step(m.ms_per_step.value_or(0.0));
      }
    }
    return grpc::Status::OK;
  }

  EngineStatus status() {
    std::lock_guard<std::mutex> lock(mu_);
    return engine_->status();
  }

  bool AllClientsToldFinished() {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& id : active_clients_) {
      if (!told_finished_.count(id)) return false;
    }
    return true;
  }

  void Tick() {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t before = engine_->model().version();
    Status s = engine_->Tick();
    if (!s.ok()) spdlog::error("{}", s.ToString());
    if (engine_->model().version() != before) LogRoundClosed(engine_->history().back(), " at its deadline");
    cv_.notify_all();
  }

  // Runs the commits the engine queues (Engine::TakeCommit), one at a time, without the lock, so
  // that uploads keep folding meanwhile. Returns once `stop` is true and nothing is queued.
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
  // With mutual TLS the identity is the certificate's common name, with token authentication
  // the token's client; a claimed id must match it (an empty claim at join takes it). Without
  // either the claimed id is taken as is.
  Result<std::string> Identity(grpc::ServerContext* ctx, const std::string& claimed) const {
    std::string who;
    if (mtls_) {
      auto names = ctx->auth_context()->FindPropertyValues("x509_common_name");
      if (names.empty()) return Status(StatusCode::kUnauthenticated, "no client certificate common name");
      who.assign(names[0].data(), names[0].size());
    } else if (limits_.tokens) {
      const auto& metadata = ctx->client_metadata();
      auto it = metadata.find("authorization");
      const std::string value = it == metadata.end() ? "" : std::string(it->second.data(), it->second.size());
      if (value.rfind("Bearer ", 0) != 0) {
        return Status(StatusCode::kUnauthenticated, "this server needs a client token (plexus client --token-file)");
      }
      std::optional<std::string> client = limits_.tokens->ClientFor(value.substr(7));
      if (!client) return Status(StatusCode::kUnauthenticated, "unknown client token");
      who = *client;
    } else {
      who = claimed;  // nothing proves the name: revocation by name is all there is
    }
    if (!claimed.empty() && claimed != who) {
      return Status(StatusCode::kPermissionDenied, std::string(mtls_ ? "the client certificate is" : "the token is") +
                                                       " for '" + who + "'; it cannot act as '" + claimed + "'");
    }
    if (limits_.revoked && !who.empty() && limits_.revoked->Revoked(who)) {
      return Status(StatusCode::kPermissionDenied, "client '" + who + "' is revoked on this server");
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

  // Holds one of limits_.max_concurrent_uploads places while an upload is received and decoded,
  // and the client's one upload in flight. status() says why there is none: the client already
  // has an upload in flight, or every place stayed busy for limits_.upload_slot_wait_ms.
  class UploadSlot {
   public:
    UploadSlot(FederationService* s, grpc::ServerContext* ctx, const std::string& client)
        : s_(s), ctx_(ctx), client_(client) {
      const DoorLimits& limits = s_->limits_;
      std::unique_lock<std::mutex> lock(s_->upload_mu_);
      if (s_->clients_uploading_.count(client_)) {
        status_ = ResourceExhaustedError("client '" + client_ + "' already has an upload in flight: one at a time");
        return;
      }
      if (limits.max_concurrent_uploads > 0) {
        auto free = [this] { return s_->uploads_receiving_ < s_->limits_.max_concurrent_uploads; };
        if (limits.upload_slot_wait_ms > 0) {
          if (!s_->upload_cv_.wait_for(lock, std::chrono::milliseconds(limits.upload_slot_wait_ms), free)) {
            status_ = ResourceExhaustedError(fmt::format(
                "all {} upload places stayed busy for {} ms (--max-concurrent-uploads): retry later",
                limits.max_concurrent_uploads, limits.upload_slot_wait_ms));
            return;
          }
        } else {
          s_->upload_cv_.wait(lock, free);
        }
        ++s_->uploads_receiving_;
      }
      s_->clients_uploading_.insert(client_);
      s_->receiving_[ctx_] = s_->clock_.NowMs();
      held_ = true;
    }
    ~UploadSlot() {
      if (!held_) return;
      std::lock_guard<std::mutex> lock(s_->upload_mu_);
      s_->clients_uploading_.erase(client_);
      s_->receiving_.erase(ctx_);
      if (s_->limits_.max_concurrent_uploads > 0) --s_->uploads_receiving_;
      s_->upload_cv_.notify_one();
    }
    UploadSlot(const UploadSlot&) = delete;
    UploadSlot& operator=(const UploadSlot&) = delete;

    const Status& status() const { return status_; }
    // A chunk arrived: the upload is making progress.
    void Progress() {
      std::lock_guard<std::mutex> lock(s_->upload_mu_);
      s_->receiving_[ctx_] = s_->clock_.NowMs();
    }

   private:
    FederationService* const s_;
    grpc::ServerContext* const ctx_;
    const std::string client_;
    Status status_;
    bool held_ = false;
  };

 public:
  // Cancels uploads that hold a place but delivered nothing for limits_.upload_stall_ms: their
  // handler sees the stream end, keeps what arrived for a resume, and frees the place. Called
  // by the server's ticker.
  void CancelStalledUploads() {
    if (limits_.upload_stall_ms <= 0) return;
    const int64_t now = clock_.NowMs();
    std::lock_guard<std::mutex> lock(upload_mu_);
    for (const auto& [ctx, last] : receiving_) {
      if (now - last >= limits_.upload_stall_ms && !stalled_.count(ctx)) {
        spdlog::warn("upload from {} stalled for {} ms: cancelled (what arrived is kept for a resume)", ctx->peer(),
                     now - last);
        stalled_.insert(ctx);
        ctx->TryCancel();
      }
    }
    // Forget cancelled contexts whose handlers have ended.
    for (auto it = stalled_.begin(); it != stalled_.end();) it = receiving_.count(*it) ? std::next(it) : stalled_.erase(it);
  }

 private:

  // Interrupted uploads, at most one per client (a newer one replaces it) and kPartialBudget
  // bytes in all (the oldest go first), for up to kPartialTtl.
  static constexpr size_t kPartialBudget = size_t{1} << 30;
  static constexpr std::chrono::minutes kPartialTtl{10};
  struct PartialUpload {
    std::string task_id;
    uint64_t total_bytes = 0;  // what it holds once its header is in (the model is laid out whole)
    SafetensorsStreamDecoder stream;
    std::chrono::steady_clock::time_point kept_at;
  };
  void KeepPartialLocked(const std::string& client, const std::string& task, uint64_t total,
                         SafetensorsStreamDecoder stream) {
    DropPartialLocked(client);
    if (stream.received() == 0 || total > kPartialBudget) return;
    const auto now = std::chrono::steady_clock::now();
    while (partial_bytes_ + total > kPartialBudget || (!partial_.empty() && OldestPartial()->second.kept_at + kPartialTtl < now)) {
      DropPartialLocked(OldestPartial()->first);
    }
    partial_bytes_ += total;
    partial_.insert_or_assign(client, PartialUpload{task, total, std::move(stream), now});
  }
  std::optional<SafetensorsStreamDecoder> TakePartialLocked(const std::string& client, const std::string& task,
                                                            uint64_t total) {
    auto it = partial_.find(client);
    if (it == partial_.end() || it->second.task_id != task || it->second.total_bytes != total ||
        it->second.kept_at + kPartialTtl < std::chrono::steady_clock::now()) {
      return std::nullopt;
    }
    SafetensorsStreamDecoder stream = std::move(it->second.stream);
    DropPartialLocked(client);
    return stream;
  }
  void DropPartialLocked(const std::string& client) {
    auto it = partial_.find(client);
    if (it == partial_.end()) return;
    partial_bytes_ -= it->second.total_bytes;
    partial_.erase(it);
  }
  std::map<std::string, PartialUpload>::iterator OldestPartial() {
    return std::min_element(partial_.begin(), partial_.end(), [](const auto& a, const auto& b) {
      return a.second.kept_at < b.second.kept_at;
    });
  }

  // The L2 norm of the engine's current model, computed once per version. Requires mu_.
  double ModelNormLocked() {
    const ModelState& m = engine_->model();
    if (!model_norm_ || model_norm_->first != m.version()) {
      model_norm_.emplace(m.version(), std::sqrt(simd::SquaredNorm(m.data().data(), m.num_params())));
    }
    return model_norm_->second;
  }

  // ResourceExhausted when `client` is over its request rate. Requires mu_.
  Status RateLimited(const std::string& client) {
    if (rate_.Allow(client)) return Status::Ok();
    return ResourceExhaustedError(fmt::format(
        "client '{}' is over the server's limit of {:g} requests per second; retry in {} ms", client,
        limits_.requests_per_s, rate_.RetryAfterMs(client)));
  }

  // The current version is kept encoded; older versions come from the store.
  Result<std::shared_ptr<const std::string>> EncodedModel(uint64_t version) {
    std::lock_guard<std::mutex> lock(mu_);
    if (version == engine_->model().version()) {
      if (!encoded_ || encoded_version_ != version) {
        encoded_ = std::make_shared<const std::string>(EncodeSafetensors(engine_->model()));
        encoded_version_ = version;
      }
      return encoded_;
    }
    PLEXUS_ASSIGN_OR_RETURN(ModelState m, store_->Checkpoint(version));
    return std::make_shared<const std::string>(EncodeSafetensors(m));
  }

  Engine* const engine_;
  Store* const store_;
  const ServerInfo info_;
  const bool mtls_;
  const DoorLimits limits_;
  RealClock clock_;
  RateLimiter rate_;                              // guarded by mu_
  AdaptiveNormBound adaptive_bound_;              // guarded by mu_
  std::optional<std::pair<uint64_t, double>> model_norm_;  // guarded by mu_; (version, L2 norm)
  std::map<std::string, int64_t> refusals_;       // guarded by mu_; by status code name
  std::map<std::string, PartialUpload> partial_;  // guarded by mu_; by client id
  size_t partial_bytes_ = 0;                      // guarded by mu_
  int64_t uploads_resumed_ = 0;                   // guarded by mu_
  std::mutex upload_mu_;
  std::condition_variable upload_cv_;
  int uploads_receiving_ = 0;                     // guarded by upload_mu_
  std::set<std::string> clients_uploading_;       // guarded by upload_mu_
  // Uploads holding a place, with the time of their last chunk; guarded by upload_mu_.
  std::map<grpc::ServerContext*, int64_t> receiving_;
  std::set<grpc::ServerContext*> stalled_;        // guarded by upload_mu_; cancelled for stalling

  std::mutex mu_;
  std::condition_variable cv_;
  bool shutting_down_ = false;                    // guarded by mu_
  std::set<std::string> active_clients_;          // guarded by mu_; clients seen by this process
  std::set<std::string> told_finished_;           // guarded by mu_
  std::shared_ptr<const std::string> encoded_;    // guarded by mu_
  uint64_t encoded_version_ = 0;                  // guarded by mu_
};

class GrpcFederationServer final : public FederationServer {
 public:
  GrpcFederationServer(Engine* engine, Store* store, const ServerInfo& info, const ServerTls& tls,
                       const DoorLimits& limits)
      : service_(engine, store, info, tls.enabled() && !tls.client_ca_pem.empty(), limits),
        tls_(tls),
        adaptive_flow_control_(limits.adaptive_flow_control) {}
  ~GrpcFederationServer() override { Shutdown(); }

  Status Init(const std::string& listen) {
    SkipAbseilDeadlockDetection();
    grpc::ServerBuilder builder;
    std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
    if (tls_.enabled()) {
      grpc::SslServerCredentialsOptions ssl(tls_.client_ca_pem.empty()
                                                ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                                : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
      ssl.pem_root_certs = tls_.client_ca_pem;
      ssl.pem_key_cert_pairs.push_back({tls_.key_pem, tls_.cert_pem});
      creds = grpc::SslServerCredentials(ssl);
    }
    builder.AddListeningPort(listen, creds, &port_);
    builder.RegisterService(&service_);
    builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
    builder.SetMaxSendMessageSize(kMaxMessageBytes);
    // gRPC sets SO_REUSEPORT by default, which would let a second server share the port and
    // split the clients between two federations.
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, kIdleServerThreads);
    if (!adaptive_flow_control_) builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    server_ = builder.BuildAndStart();
    if (!server_ || port_ == 0) return UnavailableError("cannot listen on " + listen + ": " + WhyCannotListen(listen));
    committer_ = std::thread([this] { service_.RunCommits(stop_commits_); });
    ticker_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(stop_mu_);
      while (!stop_cv_.wait_for(lock, std::chrono::milliseconds(200), [this] { return stopping_; })) {
        lock.unlock();
        service_.Tick();
        service_.CancelStalledUploads();
        lock.lock();
      }
    });
    return Status::Ok();
  }

  int port() const override { return port_; }
  EngineStatus status() override { return service_.status(); }
  bool AllClientsToldFinished() override { return service_.AllClientsToldFinished(); }

  void Shutdown() override {
    {
      std::lock_guard<std::mutex> lock(stop_mu_);
      if (stopping_) return;
      stopping_ = true;
    }
    stop_cv_.notify_all();
    if (ticker_.joinable()) ticker_.join();
    service_.BeginShutdown();
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    // After the last upload handler: what they queued is committed before the store closes.
    stop_commits_ = true;
    if (committer_.joinable()) committer_.join();
  }

 private:
  FederationService service_;
  const ServerTls tls_;
  const bool adaptive_flow_control_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::thread ticker_;
  std::thread committer_;
  std::atomic<bool> stop_commits_{false};
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;  // guarded by stop_mu_
};

}  // namespace

Result<std::unique_ptr<FederationServer>> FederationServer::Start(const std::string& listen, Engine* engine,
                                                                  Store* store, const ServerInfo& info,
                                                                  const ServerTls& tls, const DoorLimits& limits) {
  if (tls.enabled() && tls.key_pem.empty()) return InvalidArgumentError("TLS needs the certificate's key");
  if (tls.enabled() && tls.client_ca_pem.empty() && !limits.tokens) {
    return InvalidArgumentError("TLS without a client CA leaves clients unauthenticated: give the client CA "
                                "(mutual TLS) or a token file");
  }
  const bool proven_identities = !tls.client_ca_pem.empty() || limits.tokens;
  if (!limits.admins.empty() && !proven_identities) {
    return InvalidArgumentError("an admin list needs proven client identities: mutual TLS or a token file");
  }
  auto server = std::make_unique<GrpcFederationServer>(engine, store, info, tls, limits);
  PLEXUS_RETURN_IF_ERROR(server->Init(listen));
  return std::unique_ptr<FederationServer>(std::move(server));
}

}  // namespace plexus
