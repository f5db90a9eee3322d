#include "client/grpc_transport.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include "compression/codec.h"
#include "core/model_state.h"
#include "plexus/v1/federation.grpc.pb.h"
#include "proto/abseil_deadlock_detection.h"
#include "proto/length_delimited_field.h"
#include "proto/model_chunk_view.h"
#include "proto/secagg_wire.h"
#include "proto/shared_bytes_slice.h"

namespace plexus {
namespace {

constexpr size_t kChunkBytes = 1 << 20;
// A retried upload at least this large first asks what the server kept of the earlier attempt;
// for smaller ones the question would cost about as much as sending them again.
constexpr size_t kMinResumeBytes = 64 << 10;
constexpr int kMaxMessageBytes = 4 << 20;

bool SameCodedDownload(const CodedDownload& a, const CodedDownload& b) {
  if (a.codec != b.codec || a.base_sha256 != b.base_sha256 || a.model_sha256 != b.model_sha256) return false;
  if (a.layout.size() != b.layout.size()) return false;
  for (size_t i = 0; i < a.layout.size(); ++i) {
    if (a.layout[i].name != b.layout[i].name || a.layout[i].shape != b.layout[i].shape) return false;
  }
  return true;
}

Status FromGrpc(const grpc::Status& s, const std::string& what) {
  if (s.ok()) return Status::Ok();
  const int code = static_cast<int>(s.error_code());
  // gRPC and Plexus share code numbers; UNIMPLEMENTED (12), which Plexus lacks, is not retried.
  StatusCode c = code == 12 ? StatusCode::kFailedPrecondition : static_cast<StatusCode>(code);
  // A certificate that does not name the address will not start to: final, with what it likely
  // means (a plexus peer's certificate names no address at all).
  if (c == StatusCode::kUnavailable && s.error_message().find("is not in peer certificate") != std::string::npos) {
    return FailedPreconditionError(what + ": " + s.error_message() +
                                   ": the certificate there does not name the address --server gives (is it a plexus "
                                   "peer? plexus client needs a plexus server's address)");
  }
  return Status(c, what + ": " + s.error_message());
}

constexpr char kUploadUpdatePath[] = "/plexus.v1.Federation/UploadUpdate";
constexpr char kDownloadModelPath[] = "/plexus.v1.Federation/DownloadModel";
constexpr uint32_t kUpdateChunkDataField = 2;  // UpdateChunk.data

std::chrono::system_clock::time_point In(int64_t ms) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
}

class GrpcFederationTransport final : public FederationTransport {
 public:
  GrpcFederationTransport(const std::string& target, const ClientTls& tls, const LinkLimits& limits,
                          std::string local_dp)
      : token_(tls.token), limits_(limits), local_dp_(std::move(local_dp)) {
    SkipAbseilDeadlockDetection();
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(kMaxMessageBytes);
    args.SetMaxSendMessageSize(kMaxMessageBytes);
    // Reconnect quickly after a server restart.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
    // A connection of its own: gRPC otherwise shares one between all channels of a process with
    // the same target and arguments, which put every client of a load run (or of a test) on one
    // TCP stream, read by one server thread at a time.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channel_ = grpc::CreateCustomChannel(target, ChannelCredentialsFor(tls), args);
    stub_ = v1::Federation::NewStub(channel_);
    upload_method_ = std::make_unique<grpc::internal::RpcMethod>(kUploadUpdatePath,
                                                                 grpc::internal::RpcMethod::CLIENT_STREAMING, channel_);
    download_method_ = std::make_unique<grpc::internal::RpcMethod>(
        kDownloadModelPath, grpc::internal::RpcMethod::SERVER_STREAMING, channel_);
  }

  Result<JoinReply> Join(const std::string& client_id, int64_t num_examples, const std::string& device) override {
    Call call(this);
    grpc::ClientContext& ctx = call.ctx;
    AwaitConnection();
    ctx.set_deadline(In(10000));
    v1::JoinRequest req;
    req.set_client_id(client_id);
    req.set_num_examples(num_examples);
    req.set_device(device);
    for (const std::string& codec : CodecNames()) req.add_codecs(codec);  // what ClientRuntime can encode
    req.set_local_dp(local_dp_);
    req.set_secure_aggregation(true);  // ClientRuntime takes part in secure aggregation groups
    v1::JoinReply rep;
    PLEXUS_RETURN_IF_ERROR(FromGrpc(stub_->Join(&ctx, req, &rep), "join"));
    joined_id_ = rep.client_id();
    return JoinReply{rep.client_id(),
                     rep.model_name(),
                     rep.secure_aggregation(),
                     {rep.fallback_servers().begin(), rep.fallback_servers().end()}};
  }

  Result<secagg::View> SecureAggregation(const std::string& client_id, const std::string& task_id,
                                         const secagg::Call& message) override {
    Call call(this);
    grpc::ClientContext& ctx = call.ctx;
    ctx.set_deadline(In(60000));
    v1::SecAggRequest req;
    req.set_client_id(client_id);
    req.set_task_id(task_id);
    SecAggCallToProto(message, &req);
    v1::SecAggReply rep;
    PLEXUS_RETURN_IF_ERROR(FromGrpc(stub_->SecureAggregation(&ctx, req, &rep), "secure aggregation"));
    return SecAggViewFromProto(rep);
  }

  Result<PollAnswer> Poll(const std::string& client_id, int64_t wait_ms) override {
    Call call(this);
    grpc::ClientContext& ctx = call.ctx;
    AwaitConnection();
    ctx.set_deadline(In(wait_ms + 10000));
    v1::PollTaskRequest req;
    req.set_client_id(client_id);
    req.set_wait_ms(static_cast<uint32_t>(wait_ms));
    v1::PollTaskReply rep;
    PLEXUS_RETURN_IF_ERROR(FromGrpc(stub_->PollTask(&ctx, req, &rep), "poll"));
    return AnswerOf(rep);
  }

  Status ReportEvaluation(const std::string& client_id, const std::string& task_id,
                          const Evaluation& evaluation) override {
    Call call(this);
    grpc::ClientContext& ctx = call.ctx;
    ctx.set_deadline(In(10000));
    v1::EvaluationReport req;
    req.set_client_id(client_id);
    req.set_task_id(task_id);
    req.set_loss(evaluation.loss);
    req.set_accuracy(evaluation.accuracy);
    req.set_examples(evaluation.examples);
    v1::EvaluationAck rep;
    return FromGrpc(stub_->ReportEvaluation(&ctx, req, &rep), "evaluation report");
  }

  // The chunks are read as gRPC received them, their data handed to the sink from gRPC's own
  // buffers (ModelChunkView): the generated stub would first copy each chunk's megabyte into a
  // string.
  Status Download(uint64_t version, DownloadSink* sink) override {
    Call call(this);
    grpc::ClientContext& ctx = call.ctx;
    ctx.set_deadline(In(120000));
    const uint64_t resumed_at = sink->received();
    v1::DownloadModelRequest req;
    req.set_version(version);
    req.set_offset(resumed_at);
    req.set_client_id(joined_id_);
    std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
        grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(channel_.get(), *download_method_, &ctx, req));
    grpc::ByteBuffer message;
    std::vector<grpc::Slice> slices;
    std::vector<std::string_view> pieces;
    ModelChunkView chunk;
    uint64_t total = 0;
    while (reader->Read(&message)) {
      slices.clear();
      pieces.clear();
      Status read = message.Dump(&slices).ok() ? Status::Ok() : DataLossError("download: an unreadable model chunk");
      for (const grpc::Slice& s : slices) pieces.emplace_back(reinterpret_cast<const char*>(s.begin()), s.size());
      if (read.ok()) read = ParseModelChunk(pieces, &chunk);
      if (read.ok() && (chunk.offset != sink->received() || chunk.version != version)) {
        read = DataLossError("download: chunk at offset " + std::to_string(chunk.offset) + " does not continue byte " +
                             std::to_string(sink->received()));
      }
      total = chunk.total_bytes;
      // A chunk without data still tells the sink the size (it decodes bytes kept from before then).
      if (read.ok() && chunk.data.empty()) read = sink->Append({}, total);
      for (size_t i = 0; read.ok() && i < chunk.data.size(); ++i) read = sink->Append(chunk.data[i], total);
      if (!read.ok()) {
        ctx.TryCancel();
        return read;
      }
    }
    return Finished(reader->Finish(), version, resumed_at, total, sink);
  }

  Status DownloadCoded(uint64_t version, const std::string& codec, const std::string& base_sha256, std::string* buffer,
                       uint64_t* total_bytes, CodedDownload* info) override {
    v1::DownloadModelRequest req;
    req.set_version(version);
    req.set_codec(codec);
    req.set_base_sha256(base_sha256);
    StringDownloadSink sink(buffer);
    Status s = Stream(req, &sink, info);
    *total_bytes = sink.total();
    return s;
  }

  // Streams a coded download from byte sink->received() on, through the generated parser (the
  // chunks describe the coding): each chunk's description of the coded bytes goes to *coded (never
  // null: DownloadCoded fills it), and must match it when the sink already holds some.
  Status Stream(v1::DownloadModelRequest req, DownloadSink* sink, CodedDownload* coded) {
    Call call(this);
    grpc::ClientContext& ctx = call.ctx;
    ctx.set_deadline(In(120000));
    const uint64_t version = req.version();
    const uint64_t resumed_at = sink->received();
    req.set_offset(resumed_at);
    req.set_client_id(joined_id_);
    auto reader = stub_->DownloadModel(&ctx, req);
    v1::ModelChunk chunk;
    uint64_t total = 0;
    while (reader->Read(&chunk)) {
      if (chunk.offset() != sink->received() || chunk.version() != version) {
        ctx.TryCancel();
        return DataLossError("download: chunk at offset " + std::to_string(chunk.offset()) +
                             " does not continue byte " + std::to_string(sink->received()));
      }
      CodedDownload said{chunk.codec(), chunk.base_sha256(), chunk.model_sha256(), {}};
      for (const v1::TensorLayout& t : chunk.layout()) {
        said.layout.push_back({t.name(), std::vector<int64_t>(t.shape().begin(), t.shape().end())});
      }
      if (sink->received() > 0 && !SameCodedDownload(said, *coded)) {
        ctx.TryCancel();
        return DataLossError("download: the coded model changed while it was resumed");
      }
      *coded = std::move(said);
      total = chunk.total_bytes();
      if (Status s = sink->Append(chunk.data(), total); !s.ok()) {
        ctx.TryCancel();
        return s;
      }
    }
    return Finished(reader->Finish(), version, resumed_at, total, sink);
  }

  // How a download stream ended, given gRPC's status, where it resumed and the size announced.
  static Status Finished(const grpc::Status& status, uint64_t version, uint64_t resumed_at, uint64_t total,
                         const DownloadSink* sink) {
    Status finished = FromGrpc(status, "download model " + std::to_string(version));
    // A resume from kept bytes that cannot be right (more than the model, or all of it, so the
    // server sends nothing): start over (DataLoss), rather than retry the same offset forever.
    if (resumed_at > 0 && finished.code() == StatusCode::kOutOfRange) {
      return DataLossError("download: the " + std::to_string(resumed_at) + " bytes kept are more than the model");
    }
    PLEXUS_RETURN_IF_ERROR(finished);
    if (resumed_at > 0 && sink->received() == resumed_at) {
      return DataLossError("download: nothing after the " + std::to_string(resumed_at) + " bytes kept");
    }
    if (total == 0 || sink->received() != total) return UnavailableError("download: stream ended early");
    return Status::Ok();
  }

  // A retried upload larger than kMinResumeBytes first asks how much of it the server holds from the
  // interrupted attempt and sends only the rest; a resume the server cannot match is retried
  // from byte 0.
  Result<UploadAck> Upload(const UploadHeader& h, std::shared_ptr<const Payload> payload) override {
    AwaitConnection();
    uint64_t offset = 0;
    if (h.resume && payload->size() > kMinResumeBytes) {
      Result<uint64_t> held = HeldBytes(h, payload->size());
      if (held.ok() && *held < payload->size()) offset = *held;
    }
    Result<UploadAck> r = UploadFrom(h, payload, offset);
    if (offset > 0 && !r.ok() &&
        (r.status().code() == StatusCode::kAborted || r.status().code() == StatusCode::kFailedPrecondition)) {
      r = UploadFrom(h, payload, 0);
    }
    return r;
  }

  void Shutdown() override {
    std::lock_guard<std::mutex> lock(calls_mu_);
    shut_down_ = true;
    for (grpc::ClientContext* ctx : calls_) ctx->TryCancel();
  }

 private:
  Result<uint64_t> HeldBytes(const UploadHeader& h, size_t total) {
    Call call(this);
    grpc::ClientContext& ctx = call.ctx;
    ctx.set_deadline(In(10000));
    v1::UploadStatusRequest req;
    req.set_client_id(h.client_id);
    req.set_task_id(h.task_id);
    req.set_total_bytes(total);
    v1::UploadStatusReply rep;
    PLEXUS_RETURN_IF_ERROR(FromGrpc(stub_->UploadStatus(&ctx, req, &rep), "upload status of task " + h.task_id));
    return static_cast<uint64_t>(rep.received_bytes());
  }

  Result<UploadAck> UploadFrom(const UploadHeader& h, const std::shared_ptr<const Payload>& payload, uint64_t offset) {
    Call call(this);
    grpc::ClientContext& ctx = call.ctx;
    ctx.set_deadline(In(120000));
    v1::UploadReply rep;
    // The chunks go out as raw buffers: the few bytes of a protobuf field header, then slices
    // of the payload itself (which they keep alive: the head's part and the body's part of the
    // chunk), so the payload is not copied at all; the generated stub would copy it twice (into a
    // message, then into gRPC's buffer). The bytes on the wire are those of UpdateChunk messages.
    std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
        grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(channel_.get(), *upload_method_, &ctx, &rep));
    v1::UpdateChunk first;
    v1::UpdateHeader* hdr = first.mutable_header();
    hdr->set_client_id(h.client_id);
    hdr->set_task_id(h.task_id);
    hdr->set_base_version(h.base_version);
    hdr->set_num_examples(h.num_examples);
    hdr->set_local_steps(h.local_steps);
    for (const auto& [k, v] : h.metrics) (*hdr->mutable_metrics())[k] = v;
    hdr->set_encoding(h.codec.empty() ? v1::ENCODING_DELTA_SAFETENSORS_F32 : v1::ENCODING_DELTA_CODEC);
    hdr->set_codec(h.codec);
    hdr->set_total_bytes(payload->size());
    hdr->set_want_next_task(h.want_next_task);
    if (offset > 0) {
      hdr->set_offset(offset);
      hdr->set_payload_sha256(payload->Sha256Hex());
    }
    const std::string first_bytes = first.SerializeAsString();
    grpc::Slice first_slice(first_bytes);
    grpc::ByteBuffer message(&first_slice, 1);
    bool ok = writer->Write(message);
    const size_t chunk_bytes = UploadChunkBytes();
    const auto started = std::chrono::steady_clock::now();
    for (size_t off = offset; ok && off < payload->size(); off += chunk_bytes) {
      if (limits_.max_upload_bytes_per_s > 0 && !WaitForPace(started, off - offset)) break;  // shut down
      const size_t n = std::min(chunk_bytes, payload->size() - off);
      grpc::Slice parts[3] = {grpc::Slice(LengthDelimitedFieldHeader(kUpdateChunkDataField, n))};
      message = grpc::ByteBuffer(parts, 1 + PayloadSlices(payload, off, n, parts + 1));
      ok = writer->Write(message);
    }
    writer->WritesDone();
    PLEXUS_RETURN_IF_ERROR(FromGrpc(writer->Finish(), "upload update for task " + h.task_id));
    UploadAck ack;
    ack.accepted_for_version = rep.accepted_for_version();
    if (rep.has_next()) {
      Result<PollAnswer> next = AnswerOf(rep.next());
      if (next.ok()) ack.next = std::move(next).value();  // an empty answer: poll as usual
    }
    return ack;
  }

  // A quarter second's worth of bytes under a rate limit (at least 16 KiB), else kChunkBytes.
  size_t UploadChunkBytes() const {
    if (limits_.max_upload_bytes_per_s <= 0) return kChunkBytes;
    return std::clamp<size_t>(static_cast<size_t>(limits_.max_upload_bytes_per_s / 4), 16 << 10, kChunkBytes);
  }

  // Waits until `sent` bytes since `started` are within the upload rate limit; false when the
  // transport was shut down meanwhile.
  bool WaitForPace(std::chrono::steady_clock::time_point started, size_t sent) {
    const auto due =
        started + std::chrono::microseconds(static_cast<int64_t>(static_cast<double>(sent) * 1e6 /
                                                                 static_cast<double>(limits_.max_upload_bytes_per_s)));
    while (!shut_down()) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= due) return true;
      std::this_thread::sleep_for(
          std::min<std::chrono::steady_clock::duration>(due - now, std::chrono::milliseconds(50)));
    }
    return false;
  }

  static Result<PollAnswer> AnswerOf(const v1::PollTaskReply& rep) {
    PollAnswer a;
    switch (rep.answer_case()) {
      case v1::PollTaskReply::kTask: {
        const v1::TrainingTask& t = rep.task();
        a.kind = PollAnswer::Kind::kTask;
        a.task.task_id = t.task_id();
        a.task.round = t.round();
        a.task.model_version = t.model_version();
        a.task.model_sha256 = t.model_sha256();
        if (t.has_model_crc32c()) a.task.model_crc32c = t.model_crc32c();
        a.task.hyperparams.local_epochs = t.local_epochs();
        a.task.hyperparams.local_steps = t.local_steps();
        a.task.hyperparams.batch_size = t.batch_size();
        a.task.hyperparams.learning_rate = t.learning_rate();
        a.task.hyperparams.momentum = t.momentum();
        a.task.hyperparams.optimizer = t.optimizer().empty() ? "sgd" : t.optimizer();
        a.task.hyperparams.weight_decay = t.weight_decay();
        a.task.hyperparams.config = {t.config().begin(), t.config().end()};
        a.task.deadline_ms = t.deadline_in_ms();
        a.task.upload_codec = t.upload_codec();
        a.task.download_codec = t.download_codec();
        a.task.evaluate_only = t.evaluate_only();
        break;
      }
      case v1::PollTaskReply::kRetryAfterMs:
        a.kind = PollAnswer::Kind::kWait;
        a.retry_after_ms = rep.retry_after_ms();
        break;
      case v1::PollTaskReply::kFinished:
        a.kind = PollAnswer::Kind::kFinished;
        break;
      default:
        return InvalidArgumentError("poll: the server sent an empty answer");
    }
    return a;
  }

  // After a failed connection attempt, gRPC fails calls at once with the cached error until it
  // tries again, and it may not try again until asked: a client that came up before its server,
  // or retried during a restart, could miss a server that had been back for a while. Asks for a
  // connection and gives it up to two seconds; the call then fails with the real error if none.
  void AwaitConnection() {
    if (channel_->GetState(/*try_to_connect=*/true) != GRPC_CHANNEL_TRANSIENT_FAILURE) return;
    // In slices, so that a Shutdown() meanwhile is not kept waiting.
    const auto until = In(2000);
    while (!shut_down() && std::chrono::system_clock::now() < until) {
      if (channel_->WaitForConnected(std::min(until, In(100)))) return;
    }
  }

  void Authorize(grpc::ClientContext& ctx) const {
    if (!token_.empty()) ctx.AddMetadata("authorization", "Bearer " + token_);
  }

  // One call's context, authorized and registered for as long as the call runs, so that
  // Shutdown() can cancel it from another thread. After Shutdown() a new call is cancelled at once.
  class Call {
   public:
    explicit Call(GrpcFederationTransport* transport) : transport_(transport) {
      transport_->Authorize(ctx);
      std::lock_guard<std::mutex> lock(transport_->calls_mu_);
      if (transport_->shut_down_) ctx.TryCancel();  // takes effect when the call starts
      transport_->calls_.insert(&ctx);
    }
    ~Call() {
      std::lock_guard<std::mutex> lock(transport_->calls_mu_);
      transport_->calls_.erase(&ctx);
    }
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

    grpc::ClientContext ctx;

   private:
    GrpcFederationTransport* const transport_;
  };

  bool shut_down() const {
    std::lock_guard<std::mutex> lock(calls_mu_);
    return shut_down_;
  }

  const std::string token_;
  const LinkLimits limits_;
  const std::string local_dp_;  // announced at join
  mutable std::mutex calls_mu_;
  std::set<grpc::ClientContext*> calls_;  // calls in progress; guarded by calls_mu_
  bool shut_down_ = false;                // guarded by calls_mu_
  std::string joined_id_;                 // named in downloads, which the server checks like every other call
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Federation::Stub> stub_;
  std::unique_ptr<grpc::internal::RpcMethod> upload_method_;
  std::unique_ptr<grpc::internal::RpcMethod> download_method_;
};

}  // namespace

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(const ClientTls& tls) {
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = tls.ca_pem;
  ssl.pem_cert_chain = tls.cert_pem;
  ssl.pem_private_key = tls.key_pem;
  return grpc::SslCredentials(ssl);
}

std::unique_ptr<FederationTransport> MakeGrpcFederationTransport(const std::string& target, const ClientTls& tls,
                                                                 const LinkLimits& limits,
                                                                 const std::string& local_dp) {
  return std::make_unique<GrpcFederationTransport>(target, tls, limits, local_dp);
}

}  // namespace plexus
