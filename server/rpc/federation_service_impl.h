// FederationServiceImpl: the door's gRPC handlers behind FederationService (federation_service.h),
// private to server/rpc. Admission, polls, downloads, status, metrics and the commit thread are
// in federation_service.cpp; uploads, their status, evaluation reports and secure aggregation's
// messages in federation_service_uploads.cpp. Thread-safe as FederationService says: every
// handler takes mu_ for the engine and the counters it guards.
#pragma once

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
#include "compression/codec.h"
#include "compression/coded_downloads.h"
#include "core/safetensors.h"
#include "proto/length_delimited_field.h"
#include "proto/secagg_wire.h"
#include "proto/shared_bytes_slice.h"
#include "server/rpc/caller_identity.h"
#include "server/rpc/evaluation_desk.h"
#include "server/rpc/federation_service.h"
#include "server/rpc/model_downloads.h"
#include "server/rpc/partial_uploads.h"
#include "server/rpc/proto_conversion.h"
#include "server/rpc/rate_limiter.h"
#include "server/rpc/update_norm_gate.h"
#include "server/rpc/upload_places.h"
#include "server/rpc/upload_receiver.h"

namespace plexus {

class FederationServiceImpl final : public v1::Federation::Service {
 public:
  FederationServiceImpl(Engine* engine, Store* store, ServerInfo info, bool mtls, const DoorLimits& limits,
                        const Clock* clock);

  grpc::Status Join(grpc::ServerContext* ctx, const v1::JoinRequest* req, v1::JoinReply* rep) override;

  // Long poll: waits (in real time, a retry interval at most between looks) until the engine has
  // an answer or the wait, measured on the injected clock, is over.
  grpc::Status PollTask(grpc::ServerContext* ctx, const v1::PollTaskRequest* req, v1::PollTaskReply* rep) override;

  // Federation.DownloadModel: each chunk goes out as its protobuf fields followed by a slice that
  // points into the encoded model and keeps it alive, so the model is not copied per download.
  grpc::Status DownloadModelRaw(grpc::ServerContext* ctx,
                                grpc::ServerSplitStreamer<v1::DownloadModelRequest, grpc::ByteBuffer>* stream);

  // Federation.UploadUpdate: the header is checked (identity, rate, size, a place), the payload
  // received and decoded with no lock held, weights turned into a delta and the norm taken, all
  // before mu_; under it, only the bounds, the engine's Submit and the reply.
  grpc::Status UploadUpdateRaw(grpc::ServerContext* ctx, grpc::ServerReader<grpc::ByteBuffer>* reader,
                               v1::UploadReply* rep);

  // Refuses an upload for what it holds (a bound, values, layout): its client does not train a
  // refused task again, so the engine stops waiting for it (a sync round samples another client
  // or closes with what it has) instead of holding the round until its deadline.
  grpc::Status RefuseContent(const v1::UpdateHeader& header, const Status& why);
  grpc::Status RefuseContentLocked(const v1::UpdateHeader& header, const Status& why);

  grpc::Status UploadStatus(grpc::ServerContext* ctx, const v1::UploadStatusRequest* req,
                            v1::UploadStatusReply* rep) override;

  grpc::Status ReportEvaluation(grpc::ServerContext* ctx, const v1::EvaluationReport* req, v1::EvaluationAck*) override;

  grpc::Status SecureAggregation(grpc::ServerContext* ctx, const v1::SecAggRequest* req, v1::SecAggReply* rep) override;

  grpc::Status GetStatus(grpc::ServerContext* ctx, const v1::StatusRequest*, v1::StatusReply* rep) override;

  EngineStatus status();
  Status WithEngine(const std::function<Status(Engine&)>& fn);
  bool WaitForEngine(const std::function<bool(Engine&)>& ready, int64_t max_wait_ms);

  std::map<uint64_t, RoundRecord> FederatedEvaluations();

  ServerMetrics metrics();

  bool AllClientsToldFinished();

  void Tick();

  void RunCommits(const std::atomic<bool>& stop);

  void BeginShutdown();

 private:
  static constexpr size_t kChunkBytes = 1 << 20;
  static constexpr int64_t kMaxPollWaitMs = 30000;
  // Where Federation.DownloadModel and UploadUpdate sit among the service's methods (the order of
  // the rpc lines in federation.proto); the transfers' integration tests fail should they move.
  static constexpr int kDownloadModelMethod = 2;
  static constexpr int kUploadUpdateMethod = 3;
  static constexpr uint32_t kModelChunkDataField = 4;  // ModelChunk.data

  // A version was just served: logs it (`how`: "" or e.g. " at its deadline") and, when an
  // upload completed it, counts the time since that upload and since the previous version in
  // upload_metrics_ (ServerMetrics::versions_timed). Requires mu_.
  void VersionServedLocked(const RoundRecord& r, std::string_view how);

  // Says when the open secure group moved to another stage or a group aborted. Requires mu_.
  void LogSecureStageLocked();

  EngineStatus StatusLocked();

  // Whether the client's tasks name the server's codec `spec`: there is one, and the client
  // advertised it when it joined (to this process: after a restart, until it joins again, float32).
  bool TakesCodecLocked(const std::string& client_id, const std::string& spec) const;

  // Fills `rep` with a task or "finished" and returns true; false (nothing filled) for "wait".
  bool AnswerLocked(const std::string& client_id, const PollAnswer& a, v1::PollTaskReply* rep);

  // The caller's identity (CallerIdentity::Of). A revoked caller is refused, and the engine lets
  // go of it: its open task goes to another client, and it no longer counts as connected. Takes mu_.
  Result<std::string> Identify(const grpc::ServerContext* ctx, const std::string& claimed);

  // Logs and counts a refusal; RefuseLocked when mu_ is already held.
  grpc::Status Refuse(const char* call, const Status& s);
  grpc::Status RefuseLocked(const char* call, const Status& s);

  // ResourceExhausted when `client` is over its request rate. Requires mu_.
  Status RateLimited(const std::string& client);

  // The engine's model now (immutable: downloads encode it without mu_) and, for a client that
  // named the hash of the model it holds, the published version with that hash.
  std::shared_ptr<const ModelState> Snapshot(const std::string& base_sha256 = "",
                                             std::optional<uint64_t>* held_version = nullptr);

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
  // guarded by mu_: when the upload that completed the version being committed had arrived
  // whole (-1: none such), and when the newest version was served (-1: none yet).
  int64_t closing_upload_received_ms_ = -1;
  int64_t last_served_ms_ = -1;
  std::atomic<int64_t> download_bytes_{0};
  bool shutting_down_ = false;                                  // guarded by mu_
  std::set<std::string> active_clients_;                        // guarded by mu_; clients seen by this process
  std::set<std::string> told_finished_;                         // guarded by mu_
  std::map<std::string, std::set<std::string>> client_codecs_;  // guarded by mu_; advertised at join
  std::unique_ptr<Codec> upload_codec_;                         // null: float32 uploads only
  std::unique_ptr<Codec> partial_sum_codec_;                    // with ServerInfo::accept_partial_sums: exactsum
  std::unique_ptr<Codec> bundle_codec_;                         // with ServerInfo::max_bundle_updates: bundle
  std::optional<ModelState> codec_layout_;     // the model's layout (values unset), for decoding coded updates
  EvaluationDesk evaluations_;                 // guarded by mu_
  std::unique_ptr<ModelDownloads> downloads_;  // taken without mu_
};

}  // namespace plexus
