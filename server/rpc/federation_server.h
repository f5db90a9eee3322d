// FederationServer: serves an Engine (any federation mode) over gRPC (plexus.v1.Federation) on one address.
// Every engine call happens under one mutex; long polls wait on a condition variable that is
// signalled whenever the engine's state may have changed. A ticker thread applies round
// deadlines; a committer thread runs the commits the engine leaves to its caller
// (Engine::TakeCommit) without the mutex, and uploads wait while two are pending. Update uploads are size-checked chunk
// by chunk against the current model's size and decoded only once complete. Borrows the engine and store, which must
// outlive it. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "server/coordinator/engine.h"
#include "server/coordinator/federated_evaluation.h"
#include "server/rpc/revocation_list.h"
#include "server/rpc/token_registry.h"
#include "server/store/store.h"

namespace plexus {

struct ServerInfo {
  std::string model_name;
  int64_t rounds_total = 0;
  // The codec (compression/codec.h spec) tasks ask updates in, for clients that advertise it at
  // join (the others send float32); empty: float32 for all.
  std::string upload_codec{};
  // Evaluation of published versions by the clients, on their held-out data (off by default).
  FederatedEvaluationOptions federated_eval{};
  // The codec training tasks' models are downloaded in, for clients that advertise it: the
  // change from the model the client last downloaded when the server still holds that one, else
  // the whole model. One that keeps every value (f32, fp16, bf16, int8); empty: float32.
  std::string download_codec{};
  // The model's tensors that are buffers (a TorchScript model's BatchNorm statistics), not
  // trainable: left out of the norm bounds, their changes checked for range instead
  // (server/rpc/update_norm.h).
  std::vector<std::string> buffer_tensors{};
  // Local differential privacy the clients must run, as they announce it at join ("clip=C,noise=Z";
  // empty: none). A client announcing anything else is refused.
  std::string local_dp{};
  // Central DP: epsilon at dp_delta after a number of published versions (for GetStatus); unset:
  // no central DP. Called under the server's lock: must be cheap and not call back.
  std::function<double(uint64_t versions)> dp_epsilon{};
  double dp_delta = 0;
  // Takes edge aggregators' partial sums (the `exactsum` codec, aggregators/partial_sum_delta.h)
  // from any client, whatever the tasks' codec: for a strategy that folds them (fedavg_exact).
  bool accept_partial_sums = false;
  // Takes edge aggregators' forwarded client updates (the `bundle` codec,
  // aggregators/update_bundle.h: plexus server --upstream-forward raw) of at most this many updates
  // each; 0: none. For sync rounds: each update is folded as if its client had sent it.
  int64_t max_bundle_updates = 0;
  // The client ids that may send partial sums or bundles (the edges' --upstream-client-id, or
  // their certificates' names under mutual TLS); empty: any joined client. Either multiplies a
  // client's say (a partial counts as many updates as it claims), so a root whose edges are
  // known names them.
  std::set<std::string> edge_clients{};
  // Told to every client at join: other servers of the federation (HOST:PORT) to turn to when this
  // one stops answering (an edge's siblings or its parent).
  std::vector<std::string> fallback_servers{};
};

// Checks at the door, besides the ones that always apply (identity, sizes, shapes, finite
// values, known tasks). Refusals of every kind are logged and counted per status code in the
// admin status.
struct DoorLimits {
  double max_update_norm = 0;  // refuse updates whose L2 norm exceeds this (0: no bound)
  // Refuse updates whose L2 norm (trainable tensors) exceeds this many times the median of the
  // latest norms of the last `adaptive_norm_clients` distinct clients (or, before
  // `adaptive_norm_min_clients` have sent one, of the model's norm): AdaptiveNormBound. 0: off.
  double adaptive_norm_factor = 10;
  size_t adaptive_norm_clients = 100;
  size_t adaptive_norm_min_clients = 5;
  double requests_per_s = 100;  // per client, on average (0: no limit)
  double burst = 200;           // per client, at once
  // Uploads received and decoded at once; the others wait before reading their payload (its
  // bytes wait in the transport's flow control), so the server holds a few models' worth of
  // uploads whatever the number of clients. 0: no bound.
  int max_concurrent_uploads = 8;
  // An upload that waits longer than this for one of those places is refused with
  // RESOURCE_EXHAUSTED (the client retries later) instead of waiting forever. 0: no bound.
  int64_t upload_slot_wait_ms = 30000;
  // An upload holding a place that delivers no chunk for this long is cancelled; what arrived is
  // kept for a resume. 0: no bound. A client has at most one upload in flight either way.
  int64_t upload_stall_ms = 30000;
  // An upload holding a place that delivers fewer bytes per second than this over any window of
  // `upload_rate_window_ms` is cancelled too (a drip is cut like a silent upload), and its client
  // then shares three quarters of the places with other such clients. 0: no minimum.
  int64_t upload_min_bytes_per_s = 1024;
  int64_t upload_rate_window_ms = 5000;
  // Polls in progress at once (each long poll holds a server thread while it waits); more are
  // refused with RESOURCE_EXHAUSTED and the client retries. 0: no bound. The threads of all
  // calls together are capped by a gRPC resource quota sized from this and the upload places.
  int max_long_polls = 1024;
  // How much of each upload the transport takes in ahead of the server reading it. Adaptive
  // (gRPC's default): each stream's window grows with the link's measured bandwidth-delay
  // product, which uploads over long round trips need to go at the link's speed. Fixed: gRPC's
  // 64 KB windows; on a LAN or one machine, far less memory per waiting upload and bytes read
  // while still in cache (docs/benchmarks.md), but at most 64 KB per round trip per upload.
  bool adaptive_flow_control = true;
  // Token authentication (clients without certificates): every join, poll and upload must carry
  // "authorization: Bearer TOKEN" metadata whose hash is listed; the token names the client.
  // Null: no tokens. With mutual TLS the certificate decides instead.
  std::shared_ptr<const TokenRegistry> tokens;
  // Identities refused on every call although their certificate or token is valid; null: none.
  std::shared_ptr<RevocationList> revoked;
  // When not empty, only these identities may read the admin status (needs mutual TLS or tokens,
  // so that identities are proven). Empty: the status is open to every caller.
  std::set<std::string> admins;
  // With mutual TLS or tokens the status needs a valid identity; true opens it to every caller.
  bool public_status = false;
};

// TLS: PEM contents. With `client_ca_pem` (mutual TLS) every client must present a certificate
// signed by it; its common name is the client's identity, and a client may only join, poll and
// upload as itself (PERMISSION_DENIED otherwise). Without it (only with token authentication)
// the channel is encrypted and clients identify themselves by token.
struct ServerTls {
  std::string cert_pem;
  std::string key_pem;
  std::string client_ca_pem;
  bool enabled() const { return !cert_pem.empty(); }
};

// What operators watch (`plexus server --metrics-listen`): the engine's status and the door's
// counters since this process started.
struct ServerMetrics {
  EngineStatus engine;
  std::map<std::string, int64_t> refusals;  // refused calls by status code name
  int64_t uploads_resumed = 0;
  int64_t upload_bytes_resumed = 0;   // bytes resumed uploads did not send again (their offsets)
  int64_t open_polls = 0;             // PollTask calls in progress
  int64_t upload_bytes = 0;           // payload bytes of accepted updates
  int64_t received_upload_bytes = 0;  // payload bytes that arrived in uploads, accepted or not
  int64_t download_bytes = 0;         // model bytes sent
  // Versions that an upload completed (a sync round's last update, a full FedBuff buffer): how
  // long from that upload's last byte to the version being served (its durable write,
  // aggregation, commit, evaluation), and from the version before being served to this one.
  int64_t versions_timed = 0;
  double after_last_upload_ms_sum = 0;
  double version_interval_ms_sum = 0;
  // Accepted uploads by how long they took (first chunk to acknowledgement): counts of those at
  // most kUploadSecondsBounds[i] seconds, then all of them.
  static constexpr double kUploadSecondsBounds[] = {0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60};
  std::vector<int64_t> upload_seconds_le;  // cumulative, one per bound
  int64_t upload_count = 0;
  double upload_seconds_sum = 0;
  // Counts an accepted upload of `bytes` that took `seconds`.
  void CountUpload(int64_t bytes, double seconds);
  // For the dashboard: (version, test accuracy) of every evaluated version, oldest first, and the
  // newest published version's record (its merged updates in the asynchronous modes).
  std::vector<std::pair<uint64_t, double>> accuracy;
  std::optional<RoundRecord> last_round;
};

class FederationServer {
 public:
  // Unavailable when the address cannot be bound.
  static Result<std::unique_ptr<FederationServer>> Start(const std::string& listen, Engine* engine, Store* store,
                                                         const ServerInfo& info, const ServerTls& tls = {},
                                                         const DoorLimits& limits = {}, const Clock* clock = nullptr);
  virtual ~FederationServer() = default;

  virtual int port() const = 0;
  // Engine status under the server's lock.
  virtual EngineStatus status() = 0;
  virtual ServerMetrics metrics() = 0;
  // Runs `fn` on the engine under the server's lock, then wakes the long polls if the engine's
  // poll_epoch moved (it may have a task for them now), and returns what `fn` returned: how a process drives an engine
  // beside the clients' calls (an edge aggregator's upstream adopting its parent's versions).
  virtual Status WithEngine(const std::function<Status(Engine&)>& fn) = 0;
  // Waits until `ready` (run on the engine under the server's lock) holds, the server shuts down,
  // or `max_wait_ms` passes, and returns its last answer. It is asked again whenever the engine's
  // state may have changed (an upload, a poll, a deadline, a commit): a caller waiting for a round
  // to close (an edge's upstream) wakes then, not on a timer.
  virtual bool WaitForEngine(const std::function<bool(Engine&)>& ready, int64_t max_wait_ms) = 0;
  // True once every client that called this server has been told the federation finished.
  virtual bool AllClientsToldFinished() = 0;
  // The federated evaluations closed so far, by model version (ServerInfo::federated_eval).
  virtual std::map<uint64_t, RoundRecord> FederatedEvaluations() = 0;
  // Stops accepting calls, ends open long polls, and joins all threads. Idempotent.
  virtual void Shutdown() = 0;
};

}  // namespace plexus
