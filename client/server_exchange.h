// ServerExchange: a semi-decentralized peer's side of a `plexus server` (`plexus peer --gossip
// semidecentralized:... --server HOST:PORT`), over the clients' own protocol. The server runs in
// async mode with a buffer of K updates (FedBuff's K, the sample size) and a server learning rate
// of 1, so each version it publishes is the plain mean of the K models whose updates built it.
// At each of its server rounds a sampled peer joins (once, as client `client_id`), takes a task,
// downloads the task's model (the server's current one), uploads its own model minus that one
// as an update weighing one example, and then waits until the server publishes a later version,
// which it downloads and returns: the average it is part of.
//
// The server's answers are taken by the ClientSession `plexus client` runs (join again, wait, back
// off, stop). Owns its transport. Exchange blocks (the peer runs it on a worker thread) until the answer
// comes or `wait_ms` passes; Cancel, from any thread, ends it with Cancelled. Otherwise
// thread-compatible.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "client/client_session.h"
#include "client/federation_transport.h"
#include "core/model_state.h"
#include "core/status.h"

namespace plexus {

class ServerExchange {
 public:
  ServerExchange(std::unique_ptr<FederationTransport> transport, std::string client_id, double wait_ms);

  // The server's average after this peer's `own` model joined it. DeadlineExceeded after wait_ms
  // (the server did not publish: a sampled peer is missing); FailedPrecondition when the server's
  // model has another layout or its federation is over.
  Result<ModelState> Exchange(const ModelState& own);
  void Cancel();

 private:
  Result<Task> TakeTask(double deadline_ms);
  // `sha256`, `crc32c`: what its task names (empty: a version no task named yet, unchecked; see
  // ModelDownloadSink::Finish).
  Result<ModelState> DownloadVersion(uint64_t version, const std::string& sha256, std::optional<uint32_t> crc32c,
                                     double deadline_ms, bool wait_for_it);
  double NowMs() const;
  // Sleeps up to `ms` (woken by Cancel); false once cancelled or past the deadline.
  bool Pause(double ms, double deadline_ms) const;
  // Cancelled once cancelled, else DeadlineExceeded with `why`.
  Status Stopped(std::string why) const;

  std::unique_ptr<FederationTransport> transport_;
  ClientSession session_;  // the client's decisions on the server's answers, as `plexus client`
  const double wait_ms_;
  bool joined_ = false;
  std::string evaluation_task_;  // the evaluation task being answered
  std::atomic<bool> cancelled_{false};
  mutable std::mutex pause_mu_;  // with pause_cv_: Cancel wakes a Pause at once
  mutable std::condition_variable pause_cv_;
};

}  // namespace plexus
