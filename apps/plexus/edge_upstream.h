// EdgeUpstream: the parent side of an edge aggregator (plexus server --upstream, issue 41). It
// joins the parent as one client (a ClientRuntime whose updates are not trained but contributed)
// and, for each task the parent hands it, has the edge's engine adopt the parent's model (the
// edge's clients download it from the edge: the parent's downlink carries one copy per edge),
// waits for the round the edge opens on it to close, and sends that round's exact partial sum
// (the `exactsum` codec) as the task's update. When the parent finishes, so does the edge.
// Owns its thread and transport; borrows the server, which must outlive it. Thread-safe.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "client/grpc_transport.h"
#include "core/clock.h"
#include "core/status.h"
#include "server/rpc/federation_server.h"

namespace plexus::cli {

struct UpstreamOptions {
  // HOST:PORT of the parent, then of others to turn to when it stops answering for
  // failover_after_ms (another edge, or the root: FailoverTransport).
  std::vector<std::string> parents;
  int64_t failover_after_ms = 5000;
  ClientTls tls;          // how to call them
  std::string client_id;  // this edge's id at the parent; empty: the parent assigns one
  int64_t give_up_after_ms = 300000;
  uint64_t seed = 0;  // backoff jitter
};

class EdgeUpstream {
 public:
  // Starts the thread. REQUIRES: `server` serves a SyncEngine in edge mode (SyncOptions::edge).
  EdgeUpstream(UpstreamOptions options, FederationServer* server);
  ~EdgeUpstream();  // Stop()

  // Whether the upstream has ended, and how: OK when the parent finished (the edge's engine has
  // finished too), the error that ended it otherwise.
  std::optional<Status> result();
  // Ends the upstream within a fraction of a second (a call in progress is cancelled). Idempotent.
  void Stop();

 private:
  void Run();

  const UpstreamOptions options_;
  FederationServer* const server_;
  RealClock clock_;
  std::unique_ptr<FederationTransport> transport_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::optional<Status> result_;  // guarded by mu_
  std::thread thread_;
};

}  // namespace plexus::cli
