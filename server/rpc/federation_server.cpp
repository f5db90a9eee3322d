// The gRPC server: listening (TLS or not), gRPC's settings, and the two threads beside the
// call handlers (FederationService): the ticker that applies deadlines and the committer that
// runs the engine's queued commits outside the service's lock.
#include "server/rpc/federation_server.h"
#include "compression/codec.h"
#include "compression/coded_downloads.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <iterator>
#include <mutex>
#include <thread>

#include "proto/abseil_deadlock_detection.h"
#include "server/rpc/federation_service.h"
#include "server/rpc/listen_error.h"

namespace plexus {

void ServerMetrics::CountUpload(int64_t bytes, double seconds) {
  if (upload_seconds_le.empty()) upload_seconds_le.assign(std::size(kUploadSecondsBounds), 0);
  for (size_t i = 0; i < upload_seconds_le.size(); ++i) {
    if (seconds <= kUploadSecondsBounds[i]) ++upload_seconds_le[i];
  }
  ++upload_count;
  upload_seconds_sum += seconds;
  upload_bytes += bytes;
}
namespace {

constexpr int kMaxMessageBytes = 4 << 20;
// Threads of gRPC's synchronous server that, having finished an RPC, wait for the next one
// instead of exiting. gRPC keeps 2 by default: with a dozen clients polling and uploading, it then
// started and ended a thread for most RPCs, each new thread faulting its stack back in.
constexpr int kIdleServerThreads = 64;

class GrpcFederationServer final : public FederationServer {
 public:
  GrpcFederationServer(Engine* engine, Store* store, const ServerInfo& info, const ServerTls& tls,
                       const DoorLimits& limits, const Clock* clock)
      : service_(engine, store, info, tls.enabled() && !tls.client_ca_pem.empty(), limits, clock),
        tls_(tls),
        adaptive_flow_control_(limits.adaptive_flow_control),
        // Threads for every long poll, two per upload place (the upload and a waiting one), and
        // headroom for joins, downloads, status and gRPC's own pollers.
        max_call_threads_(limits.max_long_polls > 0
                              ? limits.max_long_polls + 2 * std::max(limits.max_concurrent_uploads, 8) + 64
                              : 0) {}
  ~GrpcFederationServer() override { Shutdown(); }

  Status Init(const std::string& listen) {
    SkipAbseilDeadlockDetection();
    // The standard grpc.health.v1 service on the same port (Kubernetes probes, load balancers):
    // SERVING from the start, since a server starts only once its store is open.
    grpc::EnableDefaultHealthCheckService(true);
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
    builder.RegisterService(service_.service());
    builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
    builder.SetMaxSendMessageSize(kMaxMessageBytes);
    // gRPC sets SO_REUSEPORT by default, which would let a second server share the port and
    // split the clients between two federations.
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, kIdleServerThreads);
    if (max_call_threads_ > 0) {  // a bound on the calls in progress, whatever they are
      grpc::ResourceQuota quota("plexus-server");
      quota.SetMaxThreads(max_call_threads_);
      builder.SetResourceQuota(quota);
    }
    if (!adaptive_flow_control_) builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    server_ = builder.BuildAndStart();
    if (!server_ || port_ == 0) return UnavailableError("cannot listen on " + listen + ": " + WhyCannotListen(listen));
    if (grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService()) {
      health->SetServingStatus(true);
    }
    committer_ = std::thread([this] { service_.RunCommits(stop_commits_); });
    ticker_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(stop_mu_);
      while (!stop_cv_.wait_for(lock, std::chrono::milliseconds(200), [this] { return stopping_; })) {
        lock.unlock();
        service_.Tick();
        lock.lock();
      }
    });
    return Status::Ok();
  }

  int port() const override { return port_; }
  EngineStatus status() override { return service_.status(); }
  Status WithEngine(const std::function<Status(Engine&)>& fn) override { return service_.WithEngine(fn); }
  bool WaitForEngine(const std::function<bool(Engine&)>& ready, int64_t max_wait_ms) override {
    return service_.WaitForEngine(ready, max_wait_ms);
  }
  ServerMetrics metrics() override { return service_.metrics(); }
  bool AllClientsToldFinished() override { return service_.AllClientsToldFinished(); }
  std::map<uint64_t, RoundRecord> FederatedEvaluations() override { return service_.FederatedEvaluations(); }

  void Shutdown() override {
    {
      std::lock_guard<std::mutex> lock(stop_mu_);
      if (stopping_) return;
      stopping_ = true;
    }
    stop_cv_.notify_all();
    if (ticker_.joinable()) ticker_.join();
    service_.BeginShutdown();
    if (server_ && server_->GetHealthCheckService()) server_->GetHealthCheckService()->Shutdown();
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    // After the last upload handler: what they queued is committed before the store closes.
    stop_commits_ = true;
    if (committer_.joinable()) committer_.join();
  }

 private:
  FederationService service_;
  const ServerTls tls_;
  const bool adaptive_flow_control_;
  const int max_call_threads_;
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
                                                                  const ServerTls& tls, const DoorLimits& limits,
                                                                  const Clock* clock) {
  if (tls.enabled() && tls.key_pem.empty()) return InvalidArgumentError("TLS needs the certificate's key");
  if (tls.enabled() && tls.client_ca_pem.empty() && !limits.tokens) {
    return InvalidArgumentError(
        "TLS without a client CA leaves clients unauthenticated: give the client CA "
        "(mutual TLS) or a token file");
  }
  const bool proven_identities = !tls.client_ca_pem.empty() || limits.tokens;
  if (!limits.admins.empty() && !proven_identities) {
    return InvalidArgumentError("an admin list needs proven client identities: mutual TLS or a token file");
  }
  if (!info.upload_codec.empty()) PLEXUS_RETURN_IF_ERROR(MakeCodec(info.upload_codec).status());
  if (!info.download_codec.empty()) PLEXUS_RETURN_IF_ERROR(CodedDownloads::Create(info.download_codec).status());
  PLEXUS_RETURN_IF_ERROR(info.federated_eval.Validate());
  static const RealClock real_clock;
  auto server = std::make_unique<GrpcFederationServer>(engine, store, info, tls, limits, clock ? clock : &real_clock);
  PLEXUS_RETURN_IF_ERROR(server->Init(listen));
  return std::unique_ptr<FederationServer>(std::move(server));
}

}  // namespace plexus
