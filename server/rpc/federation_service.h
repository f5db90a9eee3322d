// FederationService: the plexus.v1 Federation service's call handlers, the locking glue between
// gRPC calls and the engine. Who calls (CallerIdentity), receiving uploads (upload_receiver.h,
// UploadPlaces, PartialUploads), message conversion (proto_conversion.h) and the door's limits
// each live in their own file; here mu_ guards the engine, and nothing model-sized happens under
// it but the engine's own work (and encoding a new version once for downloads).
// Borrows engine, store and clock. Thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>

#include "core/clock.h"
#include "plexus/v1/federation.grpc.pb.h"
#include "server/coordinator/engine.h"
#include "server/rpc/federation_server.h"
#include "server/store/store.h"

namespace plexus {

class FederationServiceImpl;

class FederationService {
 public:
  FederationService(Engine* engine, Store* store, ServerInfo info, bool mtls, const DoorLimits& limits,
                    const Clock* clock);
  ~FederationService();

  // What a grpc::ServerBuilder registers.
  grpc::Service* service();
  EngineStatus status();
  // FederationServer::WithEngine.
  Status WithEngine(const std::function<Status(Engine&)>& fn);
  // FederationServer::WaitForEngine.
  bool WaitForEngine(const std::function<bool(Engine&)>& ready, int64_t max_wait_ms);
  ServerMetrics metrics();
  bool AllClientsToldFinished();
  // The federated evaluations closed so far, by model version.
  std::map<uint64_t, RoundRecord> FederatedEvaluations();
  // Applies the engine's deadlines and cancels stalled uploads; the server's ticker calls it.
  void Tick();
  // Runs the commits the engine queues (Engine::TakeCommit), one at a time, without the lock, so
  // that uploads keep folding meanwhile. Returns once `stop` is true and nothing is queued.
  void RunCommits(const std::atomic<bool>& stop);
  // Ends open long polls and lets waiting uploads through.
  void BeginShutdown();

 private:
  std::unique_ptr<FederationServiceImpl> impl_;
};

}  // namespace plexus
