#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <exception>
#include <filesystem>
#include <thread>

#include "aggregators/registry.h"
#include "apps/plexus/client_tls_flags.h"
#include "apps/plexus/commands.h"
#include "apps/plexus/dashboard_page.h"
#include "apps/plexus/dp_flags.h"
#include "apps/plexus/edge_upstream.h"
#include "apps/plexus/help_lists.h"
#include "apps/plexus/http_endpoint.h"
#include "apps/plexus/local_dp_flag.h"
#include "apps/plexus/model_choice.h"
#include "apps/plexus/run_summary.h"
#include "apps/plexus/shared_flags.h"
#include "apps/plexus/slow_link_checks.h"
#include "apps/plexus/test_set_evaluator.h"
#include "client/failover_transport.h"
#include "compression/codec.h"
#include "compression/coded_downloads.h"
#include "compute/fashion_mnist.h"
#include "compute/model_zoo.h"
#include "compute/text_corpus.h"
#include "core/clock.h"
#include "core/memory_tuning.h"
#include "core/safetensors.h"
#include "core/thread_pool.h"
#include "server/coordinator/async_engine.h"
#include "server/coordinator/engine_factory.h"
#include "server/coordinator/sync_engine.h"
#include "server/rpc/federation_server.h"
#include "server/rpc/prometheus_text.h"
#include "server/store/sqlite_store.h"

namespace plexus::cli {
namespace {

// CLI11 check: a codec spec MakeCodec takes, or its message.
std::function<std::string(const std::string&)> CodecSpecValidator() {
  return [](const std::string& spec) {
    Result<std::unique_ptr<Codec>> codec = MakeCodec(spec);
    return codec.ok() ? std::string() : codec.status().message();
  };
}

struct ServerFlags {
  Mode mode = Mode::kSync;
  AsyncOptions async;
  const CLI::App* cmd = nullptr;  // to ask which flags were given
  std::string listen = "127.0.0.1:50051";
  std::string db = "plexus.db";
  std::string upload_codec;
  std::string download_codec;
  std::string codec;  // both directions
  std::string model = "mlp";
  std::string loss = "cross_entropy";
  std::string initial_model;  // safetensors file to start from instead of a fresh --model
  SyncOptions sync;
  std::string secagg;  // --secagg's parameters (given: cmd->count("--secagg"))
  double round_deadline_s = 300;
  double selection_wait_s = 2;
  double linger_s = 30;
  uint64_t seed = 0;
  std::string data_dir = kDefaultFashionMnistDir;
  DataFlags data;
  FederatedEvaluationOptions federated_eval;
  double federated_eval_deadline_s = 30;
  std::string metrics_out;
  bool no_eval = false;
  bool dry_run = false;
  size_t test_subset = 0;
  std::string summary_out;
  int threads = 1;
  std::string tls_cert, tls_key, tls_ca;
  bool insecure = false;
  DoorLimits limits;
  std::string tokens_file;
  std::string upstream_forward = "sum";   // at an edge: partial sums, or every update raw
  int64_t max_bundle_updates = 0;         // at a root: the largest bundle of forwarded updates taken
  std::vector<std::string> edge_clients;  // at a root: who may send partial sums and bundles (empty: anyone)
  std::string revoked_file;
  std::vector<std::string> admins;
  std::string metrics_listen;
  std::string dashboard_listen;
  // Edge aggregator (issue 41): the parent's address, and how to call it.
  std::string upstream;
  ClientTlsFiles upstream_tls;
  std::string upstream_client_id;
  double upstream_give_up_s = 300;
  double upstream_failover_after_s = 5;
  std::vector<std::string> fallback;  // told to clients at join
  int64_t keep_checkpoints = 100;
  int64_t keep_every = 0;
  DpFlags dp;
};

// Removes the database a failed start created (not one that existed before): on destruction while
// an exception leaves RunServer, once the store that uses it is closed.
class DatabaseCreatedForThisRun {
 public:
  explicit DatabaseCreatedForThisRun(std::string db)
      : db_(std::move(db)), existed_(std::filesystem::exists(db_)), exceptions_(std::uncaught_exceptions()) {}
  // The start succeeded: the database stays whatever happens next.
  void Keep() { existed_ = true; }
  ~DatabaseCreatedForThisRun() {
    if (existed_ || std::uncaught_exceptions() <= exceptions_) return;
    std::error_code ec;
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) std::filesystem::remove(db_ + suffix, ec);
    for (const char* folder : {".checkpoints", ".updates"}) std::filesystem::remove_all(db_ + folder, ec);
  }

 private:
  const std::string db_;
  bool existed_;
  const int exceptions_;
};

// What a database's federation was started with for DP: a restart must keep it, or the
// accountant's count would describe another mechanism.
std::string DpMeta(const DpFlags& dp) {
  return dp.dp + ";population=" + std::to_string(dp.population) + ";delta=" + fmt::format("{}", dp.delta);
}

void CheckSameDp(SqliteStore* store, const std::string& db, const DpFlags& dp) {
  Result<std::string> stored = store->GetMeta("dp");
  if (!stored.ok() || stored->empty()) return;
  if (dp.dp.empty()) {
    throw CommandError("database '" + db + "' holds a federation started with --dp (" + *stored +
                       "): restart it with the same --dp, --dp-population and --dp-delta");
  }
  if (*stored != DpMeta(dp)) {
    throw CommandError("database '" + db + "' holds a federation started with --dp " + *stored + ", not " + DpMeta(dp) +
                       ": the privacy accounting would not add up (use the same flags or a new --db)");
  }
}

void RunServer(const ServerFlags& f) {
  InstallStopHandlers();
  const auto started = std::chrono::steady_clock::now();
  ServeFromOneArena();
  SyncOptions sync = f.sync;
  sync.round_deadline_ms = static_cast<int64_t>(f.round_deadline_s * 1000);
  sync.selection_wait_ms = static_cast<int64_t>(f.selection_wait_s * 1000);
  sync.seed = f.seed;
  // --dp: the strategy becomes dp_fedavg with noise from OpenSSL's generator; --dp-budget ends
  // the federation at the last version within it (a version count, so a restart keeps to it).
  // --dp local: the clients clip and noise; the server only refuses those that announce otherwise.
  const std::optional<LocalDp> local_dp =
      IsLocalDp(f.dp.dp) ? std::optional<LocalDp>(ParseLocalDp(f.dp.dp)) : std::nullopt;
  if (local_dp && (f.dp.budget != 0 || f.dp.population != 0)) {
    throw CommandError(
        "--dp-budget and --dp-population are for central DP: with --dp local each client accounts for its own "
        "updates");
  }
  std::optional<DpPlan> dp =
      local_dp ? std::nullopt
               : PlanDp(f.dp, f.mode == Mode::kAsync ? f.async.buffer_size : sync.clients_per_round, sync.rounds,
                        /*default_population=*/0, /*seed=*/std::nullopt, f.cmd->count("--strategy") > 0);
  if (dp && dp->adaptive && !f.edge_clients.empty()) {
    throw CommandError(
        "--dp adaptive at a root over edges (--edge-clients): adaptive clipping counts the updates under the clip, "
        "which an edge's partial sum hides; use --dp central or tree (a fixed clip, each edge clipping to it)");
  }
  if (dp && !dp->per_release_given && !f.edge_clients.empty()) {
    throw CommandError(
        "--dp at a root over edges (--edge-clients): give per_release=N (--dp central:clip=C,noise=Z,per_release=N, "
        "or tree:...,per_release=N), N the client updates a version takes (--clients-per-round counts edges here, "
        "each partial sum many updates)");
  }
  const bool edge = !f.upstream.empty();
  if (edge) {
    // An edge forwards exact sums of its clients' deltas; whatever needs every update, or noise,
    // or a group's secrets, belongs at the root.
    if (f.mode != Mode::kSync) throw CommandError("--upstream: an edge aggregator runs sync rounds (--mode sync)");
    if (!f.dp.dp.empty()) throw CommandError("--upstream with --dp: differential privacy is applied at the root");
    if (f.cmd->count("--secagg") > 0) throw CommandError("--upstream with --secagg: not supported at an edge");
    if (f.upstream_forward == "raw") {
      // The root's rule runs over every update; the edge's sum is only its own bookkeeping.
      if (f.cmd->count("--strategy") > 0 || sync.edge_robust) {
        throw CommandError(
            "--upstream-forward raw with --strategy or --edge-robust: the edge forwards every update and the "
            "root's --strategy runs over them all; give it there");
      }
      sync.edge_forward_raw = true;
    } else if (f.upstream_forward != "sum") {
      throw CommandError("--upstream-forward must be sum or raw, not '" + f.upstream_forward + "'");
    }
    if (f.cmd->count("--strategy") == 0) sync.strategy = "fedavg_exact";
    sync.edge = true;
  }
  const int64_t rounds_asked = sync.rounds;
  if (f.cmd->count("--secagg") > 0) {
    // The mode and the strategy (central --dp's included) are the engine's to refuse.
    for (const char* flag : {"--max-update-norm", "--adaptive-norm-factor"}) {
      if (f.cmd->count(flag) > 0) {
        throw CommandError(
            std::string("--secagg with ") + flag +
            ": the server never sees an update's norm; each value is clipped to --secagg clip=R instead");
      }
    }
    sync.secagg = Take(SecAggSettings::Parse(f.secagg), "--secagg");
  }
  PlanDpWithSecAgg(&dp, &sync.secagg);
  std::map<std::string, std::string> derived;
  if (dp) derived = ApplyDpPlan(*dp, &sync.strategy, &sync.rounds);
  derived.merge(DefaultMinClients(*f.cmd, &sync));
  AsyncOptions async = AsyncOptionsFor(f.mode, f.async, sync, f.cmd);
  if (dp) async.strategy = dp->strategy;
  // FedBuff's versions are hashed and written by the server's committer thread, not under the
  // lock every upload takes (docs/benchmarks.md).
  async.commit_outside = !async.semi_async;
  const EngineOptions engine_options{f.mode, sync, async};
  Check(engine_options.Validate(), "invalid settings");
  // A root (or a flat server) whose merge keeps exact sums, or adds central DP noise to sums its
  // edges clipped, takes edges' partial sums: in sync rounds, in FedBuff's buffer (a partial's
  // sums scaled by its staleness), or in FedCompass's groups (each edge one member, its clients
  // training the steps the root assigned it).
  const bool accept_partial_sums =
      (f.mode == Mode::kSync || f.mode == Mode::kAsync || f.mode == Mode::kSemiAsync) && !sync.secagg &&
      Take(MakeAggregator(f.mode == Mode::kSync ? sync.strategy : async.strategy, nullptr))->takes_partial_sums();
  const std::vector<std::string> parents = SplitAddresses(f.upstream);
  if (edge && parents.empty()) throw CommandError("--upstream: no address given");
  const ClientTls upstream_tls = edge ? ClientTlsFromFiles(f.upstream_tls, parents, "--upstream-") : ClientTls{};

  ServerTls tls;
  DoorLimits limits = f.limits;
  if (!f.revoked_file.empty()) limits.revoked = Take(RevocationList::Open(f.revoked_file), "--revoked");
  limits.admins.insert(f.admins.begin(), f.admins.end());
  if (!f.tokens_file.empty()) {
    limits.tokens = std::make_shared<const TokenRegistry>(
        Take(TokenRegistry::Parse(ReadFileForFlag(f.tokens_file, "--tokens")), "--tokens " + f.tokens_file));
  }
  const int tls_flags = !f.tls_cert.empty() + !f.tls_key.empty() + !f.tls_ca.empty();
  const bool server_tls_only = tls_flags == 2 && f.tls_ca.empty() && limits.tokens;
  if (tls_flags != 0 && tls_flags != 3 && !server_tls_only) {
    throw CommandError(
        "mutual TLS needs all of --tls-cert, --tls-key and --tls-ca (with --tokens, "
        "--tls-cert and --tls-key alone encrypt the channel)");
  }
  if (tls_flags > 0) {
    tls.cert_pem = ReadFileForFlag(f.tls_cert, "--tls-cert");
    tls.key_pem = ReadFileForFlag(f.tls_key, "--tls-key");
    if (!f.tls_ca.empty()) tls.client_ca_pem = ReadFileForFlag(f.tls_ca, "--tls-ca");
  } else if (!IsLoopback(f.listen) && !f.insecure) {
    throw CommandError("refusing to listen on " + f.listen +
                       " without TLS: pass --tls-cert, --tls-key and --tls-ca (see plexus certs), or "
                       "--insecure on a network you trust");
  }
  std::string upload_codec = f.upload_codec;
  std::string download_codec = f.download_codec;
  if (!f.codec.empty()) {
    if (!upload_codec.empty() || !download_codec.empty()) {
      throw CommandError("--codec sets both directions: give it, or --upload-codec and --download-codec, not both");
    }
    upload_codec = download_codec = f.codec;
  }
  if (!download_codec.empty())
    Take(CodedDownloads::Create(download_codec), f.codec.empty() ? "--download-codec" : "--codec");
  CheckSlowLinkSettings(f.mode == Mode::kSync ? sync.strategy : async.strategy, sync.task, upload_codec);
  FederatedEvaluationOptions federated_eval = f.federated_eval;
  federated_eval.deadline_ms = static_cast<int64_t>(f.federated_eval_deadline_s * 1000);
  federated_eval.seed = f.seed;
  Check(federated_eval.Validate(), "--federated-eval-*");
  const ModelChoice model(f.model, f.loss);  // a model file is read (and checked) before anything starts
  const std::string& model_name = model.federation_name();
  if (f.dry_run) {  // the settings are valid as far as they can be checked without starting
    std::printf(
        "plexus server: settings valid: %s mode, %s, listen %s%s, database %s%s\n",
        std::string(ModeName(f.mode)).c_str(), sync.strategy.c_str(), f.listen.c_str(),
        tls_flags > 0 ? " with TLS" : "", f.db.c_str(),
        edge ? (", edge aggregator under " + f.upstream + (upstream_tls.enabled() ? " with TLS" : "")).c_str() : "");
    PrintResolvedSettings(*f.cmd, derived);
    return;
  }
  // A start that fails (port in use, data missing, ...) leaves no new empty database behind.
  DatabaseCreatedForThisRun created(f.db);
  std::unique_ptr<SqliteStore> store = Take(SqliteStore::Open(f.db, SqliteStore::Access::kExclusive));
  store->SetCheckpointRetention(f.keep_checkpoints, f.keep_every);
  Result<std::string> stored_model = store->GetMeta("model");
  if (stored_model.ok() && *stored_model != model_name) {
    throw CommandError("database '" + f.db + "' holds a federation of model '" + *stored_model + "', not '" +
                       model_name + "' (use another --db, or the --model it was started with)");
  }
  Check(store->PutMeta("model", model_name));
  CheckSameDp(store.get(), f.db, f.dp);
  if (!f.data.input_shape.empty()) Check(store->PutMeta("input_shape", f.data.input_shape));

  std::unique_ptr<Trainer> trainer;
  std::unique_ptr<TestSetEvaluator> evaluator;
  Dataset test;
  if (model.is_script() && !f.data.given() && !f.no_eval) {
    spdlog::info("no server-side evaluation: the server has no data for {} (give it some with --data)", f.model);
  } else if (edge) {
    spdlog::info("no server-side evaluation at an edge aggregator: its parent evaluates the versions it publishes");
  } else if (!f.no_eval) {
    test = f.data.given()
               ? LoadData(f.data, model.regression(), f.data_dir, Split::kTest)
               : Take(LoadFashionMnist(f.data_dir, Split::kTest), "server-side evaluation (or pass --no-eval)");
    trainer = Take(model.MakeTrainer(f.threads, /*portable=*/false));
    evaluator = std::make_unique<TestSetEvaluator>(trainer.get(), DatasetView::Prefix(test, f.test_subset));
  }
  RealClock clock;
  ModelState initial =
      f.initial_model.empty() ? model.Initial(f.seed) : Take(ReadSafetensorsFile(f.initial_model), "--initial-model");
  if (!f.initial_model.empty()) {
    if (Status same = initial.CheckSameLayout(model.Initial(f.seed)); !same.ok()) {
      spdlog::warn(
          "--initial-model is not a '{}' model ({}): evaluation fails and real clients cannot train it; "
          "fine for load tests",
          f.model, same.message());
    }
  }
  // Updates stored coded (int8, top-k, fp16, bf16 into the averaging family) are read back in any codec they
  // were stored in, whatever this run's --codec. The reader needs the layout, never its values:
  // an uninitialized model costs no pass over memory and no resident pages.
  store->SetCodedDeltaReader(MakeCodedDeltaReader(ModelState::UninitializedLike(initial)));
  // Secure aggregation unmasks on every core (its masks are independent keystreams).
  std::unique_ptr<ThreadPool> pool;
  if (sync.secagg) pool = std::make_unique<ThreadPool>(std::max(1u, std::thread::hardware_concurrency()));
  std::unique_ptr<Engine> engine =
      Take(OpenEngine(engine_options, initial, store.get(), &clock, evaluator.get(), pool.get()), "open federation");
  if (engine->model().version() > 0) {
    spdlog::info("resuming from checkpoint version {} in {}", engine->model().version(), f.db);
  }
  if (local_dp) {
    Check(store->PutMeta("dp", DpMeta(f.dp)));
    spdlog::info("local DP: only clients that clip to {} and add noise multiplier {} before upload may join",
                 local_dp->clip, local_dp->noise);
  }
  if (dp) {
    if (!store->GetMeta("dp").ok() && engine->model().version() > 0) {
      throw CommandError("database '" + f.db + "' published " + std::to_string(engine->model().version()) +
                         " versions without --dp: its model is not private, and no accountant can make it so (start "
                         "a new --db)");
    }
    Check(store->PutMeta("dp", DpMeta(f.dp)));
    PrintDpPlan(*dp, rounds_asked, f.dp.budget, "plexus server");
    if (engine->model().version() > 0) {
      spdlog::info("privacy: the {} versions published before this start cost epsilon {:.4g}; the count goes on",
                   engine->model().version(), dp->EpsilonAfter(static_cast<int64_t>(engine->model().version())));
    }
  }
  if (local_dp) {
    // A noised update's norm is about z·C·sqrt(P) (P parameters): far above the norms the adaptive
    // bound learns from noiseless updates, and no more than the clip and the noise make it. The
    // bound becomes that norm with room to spare (eight standard deviations of the noise), unless
    // the operator set the bounds.
    const double sigma = local_dp->noise * local_dp->clip;
    if (f.cmd->count("--adaptive-norm-factor") == 0) limits.adaptive_norm_factor = 0;
    if (f.cmd->count("--max-update-norm") == 0) {
      limits.max_update_norm = local_dp->clip + sigma * (std::sqrt(static_cast<double>(initial.num_params())) + 8);
    }
  }
  ServerInfo info{model_name,
                  sync.rounds,
                  upload_codec,
                  federated_eval,
                  download_codec,
                  model.buffers(),
                  local_dp ? local_dp->announced : std::string()};
  info.accept_partial_sums = accept_partial_sums;
  if (f.max_bundle_updates < 0) throw CommandError("--max-bundle-updates must not be negative");
  if (f.max_bundle_updates > 0 && sync.secagg) {
    throw CommandError("--max-bundle-updates with --secagg: a secure group's members send masked updates only");
  }
  info.max_bundle_updates = f.max_bundle_updates;
  info.edge_clients.insert(f.edge_clients.begin(), f.edge_clients.end());
  info.fallback_servers = f.fallback;
  if (dp) {
    info.dp_epsilon = [plan = *dp](uint64_t versions) { return plan.EpsilonAfter(static_cast<int64_t>(versions)); };
    info.dp_delta = dp->delta;
  }
  std::unique_ptr<FederationServer> server =
      Take(FederationServer::Start(f.listen, engine.get(), store.get(), info, tls, limits));
  const char* security = !tls.enabled()              ? (limits.tokens ? "no TLS, client tokens" : "no TLS")
                         : tls.client_ca_pem.empty() ? "TLS, client tokens"
                                                     : "mutual TLS";
  created.Keep();
  std::unique_ptr<HttpEndpoint> metrics_endpoint;
  if (!f.metrics_listen.empty()) {
    FederationServer* watched = server.get();
    metrics_endpoint =
        Take(HttpEndpoint::Start(f.metrics_listen,
                                 {{"/metrics",
                                   {"text/plain; version=0.0.4",
                                    [watched, dp] {
                                      const ServerMetrics m = watched->metrics();
                                      return PrometheusText(m, ResidentBytes()) +
                                             (dp ? DpPrometheusText(*dp, static_cast<int64_t>(m.engine.model_version))
                                                 : std::string());
                                    }}},
                                  // Liveness (deploy/kubernetes): answers while the process serves,
                                  // without taking the server's lock.
                                  {"/healthz", {"text/plain", [] { return std::string("ok\n"); }}}}),
             "--metrics-listen");
    spdlog::info("metrics on http://{}/metrics (port {})", f.metrics_listen, metrics_endpoint->port());
  }
  std::unique_ptr<HttpEndpoint> dashboard_endpoint;
  if (!f.dashboard_listen.empty()) {
    FederationServer* watched = server.get();
    const std::string title = std::string(ModeName(f.mode)) + " mode, model " + f.model + ", " +
                              std::to_string(sync.rounds) + " versions, strategy " + engine->strategy_description();
    dashboard_endpoint = Take(
        HttpEndpoint::Start(
            f.dashboard_listen,
            {{"/",
              {"text/html; charset=utf-8",
               [watched, title, dp] {
                 const ServerMetrics m = watched->metrics();
                 // With --dp the title carries what the published versions cost so far.
                 return RenderDashboard(
                     m, dp ? title + ", " + DpEpsilonText(*dp, static_cast<int64_t>(m.engine.model_version)) : title);
               }}}}),
        "--dashboard-listen");
    spdlog::info("dashboard on http://{}/ (port {})", f.dashboard_listen, dashboard_endpoint->port());
  }
  spdlog::info(
      "listening on {} (port {}, {}): {} mode, model {}, {} rounds, strategy {}, updates in {}, downloads in {}",
      f.listen, server->port(), security, ModeName(f.mode), f.model, sync.rounds, engine->strategy_description(),
      upload_codec.empty() ? "float32" : upload_codec + " (float32 from clients without it)",
      download_codec.empty() ? "float32" : download_codec + " (float32 to clients without it)");

  std::unique_ptr<EdgeUpstream> upstream;
  if (edge) {
    spdlog::info("edge aggregator: rounds on the versions of {}, {} sent there", f.upstream,
                 sync.edge_forward_raw ? "every update forwarded raw" : "partial sums");
    upstream = std::make_unique<EdgeUpstream>(
        UpstreamOptions{parents, static_cast<int64_t>(f.upstream_failover_after_s * 1000), upstream_tls,
                        f.upstream_client_id, static_cast<int64_t>(f.upstream_give_up_s * 1000), f.seed},
        server.get());
  }

  // A store error the engine cannot clear (a failed commit) ends the server with the reason, so
  // that a supervisor restarts it from its store, instead of refusing every call forever.
  std::optional<Status> upstream_ended;
  while (!StopRequested().load()) {
    const EngineStatus now = server->status();
    if (now.finished || !now.error.empty()) break;
    if (upstream && (upstream_ended = upstream->result()) && !upstream_ended->ok()) break;
    // Woken when the engine finishes; a failure, a signal or the upstream's end seen within
    // 100 ms. (The question is asked under the server's lock at every change: a flag, not a
    // status built each time.)
    server->WaitForEngine([](Engine& e) { return e.finished(); }, 100);
  }
  EngineStatus final_status = server->status();
  if (final_status.finished) {
    spdlog::info("federation finished at version {}; telling the clients (up to {} s)", final_status.model_version,
                 f.linger_s);
    if (dp) {
      const double epsilon = dp->EpsilonAfter(static_cast<int64_t>(final_status.model_version));
      spdlog::info("privacy: epsilon {:.4g} at delta {} after {} versions{}", epsilon, dp->delta,
                   final_status.model_version,
                   dp->max_releases > 0 && dp->max_releases < rounds_asked
                       ? fmt::format(": stopped at --dp-budget {} ({} versions asked)", f.dp.budget, rounds_asked)
                       : std::string());
    }
    // Clients that owe the final version's federated evaluation are told only once it closes.
    const double linger_s =
        federated_eval.every > 0 ? std::max(f.linger_s, f.federated_eval_deadline_s + 5) : f.linger_s;
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(linger_s * 1000));
    while (!StopRequested().load() && std::chrono::steady_clock::now() < until && !server->AllClientsToldFinished()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  } else if (!final_status.error.empty()) {
    spdlog::error("stopping: {}; state is in {}, restart to resume", final_status.error, f.db);
  } else {
    spdlog::info("stopping on signal; state is in {}, restart to resume", f.db);
  }
  const ServerMetrics door = server->metrics();
  const std::map<uint64_t, RoundRecord> federated = server->FederatedEvaluations();
  if (upstream) upstream->Stop();
  server->Shutdown();
  if (!final_status.error.empty()) throw CommandError(final_status.error);
  if (upstream_ended && !upstream_ended->ok()) {
    throw CommandError(upstream_ended->ToString() + "; state is in " + f.db + ", restart to resume");
  }

  if (final_status.finished && (!f.summary_out.empty() || !f.metrics_out.empty())) {
    RunSummary s;
    s.mode = ModeName(f.mode);
    s.updates_accepted = final_status.updates_accepted;
    s.updates_refused = final_status.updates_refused;
    s.updates_stale = final_status.updates_stale;
    s.model = f.model;
    s.language_model = model.language();
    if (s.language_model && test.size() > 0) s.unigram_bits_per_char = UnigramBitsPerChar(test);
    s.strategy = engine->strategy_description();
    s.clients = final_status.known_clients;
    s.clients_per_round = sync.clients_per_round;
    s.seed = f.seed;
    s.rounds = engine->history();
    for (RoundRecord& r : s.rounds) {  // the clients' evaluations, beside the server's
      auto it = federated.find(r.model_version);
      if (it == federated.end()) continue;
      r.federated_accuracy = it->second.federated_accuracy;
      r.federated_loss = it->second.federated_loss;
      r.federated_examples = it->second.federated_examples;
      r.federated_clients = it->second.federated_clients;
    }
    s.model_version = engine->model().version();
    s.final_model_sha256 = engine->model().ContentSha256();
    s.wall_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    s.transfers = RunSummary::Transfers{door.received_upload_bytes, door.uploads_resumed, door.upload_bytes_resumed,
                                        door.download_bytes};
    if (door.versions_timed > 0) {
      s.transfers->versions_timed = door.versions_timed;
      s.transfers->after_last_upload_ms = door.after_last_upload_ms_sum / static_cast<double>(door.versions_timed);
      if (door.version_interval_ms_sum > 0) {
        s.transfers->after_last_upload_share = door.after_last_upload_ms_sum / door.version_interval_ms_sum;
      }
    }
    if (dp) s.privacy = DpReport(*dp, s.rounds, rounds_asked);
    if (!f.summary_out.empty()) Check(WriteSummaryJson(f.summary_out, s));
    if (!f.metrics_out.empty()) Check(WriteMetricsCsv(f.metrics_out, s));
  }
}

}  // namespace

void AddServerCommand(CLI::App& app) {
  auto f = std::make_shared<ServerFlags>();
  // The defaults plexus sim has (docs/vocabulary.md: one default per concept).
  f->sync.rounds = 20;
  f->sync.clients_per_round = 5;
  CLI::App* cmd = app.add_subcommand("server", "Run the aggregation server (gRPC), with state in SQLite");
  AddModeFlags(cmd, &f->mode, &f->async);
  cmd->add_option("--listen", f->listen, "Address to serve on, HOST:PORT")->capture_default_str();
  cmd->add_option("--db", f->db,
                  "SQLite database with the federation's state, models in the folders <db>.checkpoints and "
                  "<db>.updates (resumed if it exists)")
      ->capture_default_str();
  cmd->add_option(
         "--upload-codec", f->upload_codec,
         "Ask clients for their updates in this codec, " + OneOf(CodecNames()) +
             " e.g. topk:ratio=R or qsgd:levels=L (docs/compression.md); clients that do not advertise it send float32")
      ->check(CodecSpecValidator());
  cmd->add_option("--download-codec", f->download_codec,
                  "Send training tasks' models in this codec (int8, fp16, bf16, f32): the change from the model the "
                  "client downloaded last when the server still holds it, else the whole model; clients that do not "
                  "advertise it, and evaluation tasks, get float32")
      ->check(CodecSpecValidator());
  cmd->add_option("--codec", f->codec, "Both --upload-codec and --download-codec (int8, fp16, bf16, f32)")
      ->check(CodecSpecValidator());
  cmd->add_option("--model", f->model,
                  "Model: mlp, cnn, or a TorchScript file saved from PyTorch (PATH.pt; its weights are the initial "
                  "model, and clients start with the same file)")
      ->capture_default_str();
  AddLossFlag(cmd, &f->loss);
  cmd->add_option("--initial-model", f->initial_model,
                  "Start from this model (safetensors) instead of a freshly initialized --model; its layout must "
                  "be the --model's for evaluation and for real clients (a database that holds a model wins)")
      ->check(CLI::ExistingFile);
  AddFederationFlags(cmd, &f->sync);
  AddDpFlags(cmd, &f->dp);
  cmd->add_option("--min-clients", f->sync.min_clients,
                  "Fewest clients to start a round and to close it (M); left out: 2, or the fewest updates the "
                  "strategy takes per round")
      ->capture_default_str();
  cmd->add_option("--min-updates", f->sync.min_updates,
                  "sync: the quorum at the round deadline in updates, an edge aggregator's partial sum counting "
                  "its clients' updates (at a root under edges: updates, not edges); 0: --min-clients")
      ->capture_default_str();
  cmd->add_option("--overselect", f->sync.overselect,
                  "sync: sample ceil(K x this) clients and close the round with the first K updates")
      ->capture_default_str();
  AddSecAggFlag(cmd, &f->secagg);
  cmd->add_option("--round-deadline-s", f->round_deadline_s, "Seconds before stragglers are dropped")
      ->capture_default_str();
  cmd->add_option("--selection-wait-s", f->selection_wait_s,
                  "With fewer than K but at least M clients, wait this long before sampling")
      ->capture_default_str();
  cmd->add_option("--seed", f->seed, "Seed for the initial model and client sampling")->capture_default_str();
  cmd->add_option("--data-dir", f->data_dir, "Fashion-MNIST directory for server-side evaluation")
      ->capture_default_str();
  AddDataFlags(cmd, &f->data, "Server-side evaluation data (optional with a TorchScript model)");
  cmd->add_flag("--no-eval", f->no_eval, "Skip server-side evaluation");
  cmd->add_option("--federated-eval-every", f->federated_eval.every,
                  "Federated evaluation: every V-th version (and the final one) is evaluated by clients on their "
                  "held-out data (plexus client --federated-eval-split); 0: off")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--federated-eval-fraction", f->federated_eval.fraction,
                  "Federated evaluation: the share of the known clients asked to evaluate each version (at least one)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--federated-eval-deadline-s", f->federated_eval_deadline_s,
                  "Federated evaluation: close a version's evaluation with the reports in after this long")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  cmd->add_option("--metrics-out", f->metrics_out,
                  "When the federation finishes, write per-version metrics (server-side and federated evaluation) to "
                  "this CSV file");
  cmd->add_flag("--dry-run", f->dry_run,
                "Check the settings (flags and --config, TLS files readable) without opening the database or "
                "listening, print every one with where it came from, and exit");
  cmd->add_option("--test-subset", f->test_subset, "Evaluate on the first N test examples (0 = all)");
  cmd->add_option("--summary-out", f->summary_out, "Write the run summary to this JSON file when finished");
  cmd->add_option("--linger-s", f->linger_s,
                  "After the last round, keep serving until every client has been told, at most this many seconds")
      ->capture_default_str();
  cmd->add_option("--tls-cert", f->tls_cert, "Server certificate (PEM) for mutual TLS");
  cmd->add_option("--tls-key", f->tls_key, "Server private key (PEM)");
  cmd->add_option("--tls-ca", f->tls_ca, "CA certificate (PEM) that client certificates must chain to");
  cmd->add_option("--upstream", f->upstream,
                  "Run as an edge aggregator under the server at HOST:PORT: serve this server's clients the "
                  "parent's versions and send it one exact partial sum per parent task (sync mode, fedavg_exact "
                  "or norm_bound:max=R,exact=true; "
                  "docs/deployment.md); a comma-separated list: the others are turned to when the one in use stops "
                  "answering");
  cmd->add_option("--upstream-tls-ca", f->upstream_tls.ca, "CA certificate (PEM) of the parent's certificate");
  cmd->add_option("--upstream-tls-cert", f->upstream_tls.cert,
                  "This edge's certificate (PEM) at the parent; its name is the edge's identity there");
  cmd->add_option("--upstream-tls-key", f->upstream_tls.key, "This edge's private key (PEM) at the parent");
  cmd->add_option("--upstream-token-file", f->upstream_tls.token, "This edge's token at the parent (plexus tokens)");
  cmd->add_option("--upstream-client-id", f->upstream_client_id,
                  "This edge's client id at the parent (default: assigned by the parent)");
  cmd->add_option("--fallback", f->fallback,
                  "Other servers of this federation (HOST:PORT, comma-separated) that clients turn to when this one "
                  "stops answering, told to them at join: an edge's siblings or its parent")
      ->delimiter(',');
  cmd->add_flag("--edge-robust", f->sync.edge_robust,
                "At an edge (--upstream), run a robust --strategy (median, krum, ...) over this edge's own clients "
                "and send its aggregate upstream, weighted by their examples: a weaker guarantee than the rule over "
                "every client");
  cmd->add_option("--upstream-forward", f->upstream_forward,
                  "At an edge (--upstream): sum (one exact partial sum per parent task) or raw (every client update "
                  "as it came, in one bundle, so that a robust --strategy at the root runs over them all; the root "
                  "needs --max-bundle-updates)")
      ->capture_default_str();
  cmd->add_option("--edge-clients", f->edge_clients,
                  "Take partial sums and forwarded updates only from these client ids (comma-separated: the edges' "
                  "--upstream-client-id, or their certificates' names under mutual TLS); default: from any client")
      ->delimiter(',');
  cmd->add_option("--max-bundle-updates", f->max_bundle_updates,
                  "Take edges' forwarded updates (their --upstream-forward raw), at most this many per edge and round; "
                  "each is folded as if its client had sent it (0 = take none)")
      ->capture_default_str();
  cmd->add_option("--upstream-failover-after-s", f->upstream_failover_after_s,
                  "With more than one --upstream address (HOST:PORT,HOST:PORT,...): turn to the next once the one in "
                  "use has not answered for this long")
      ->capture_default_str();
  cmd->add_option("--upstream-give-up-s", f->upstream_give_up_s, "Stop when the parent has not answered for this long")
      ->capture_default_str();
  cmd->add_option("--revoked", f->revoked_file,
                  "File of revoked client names, one per line: refused although their certificate or token is "
                  "valid; re-read when it changes (it may not exist yet: nobody is revoked until it is written)");
  cmd->add_option("--admins", f->admins,
                  "Client names allowed to read the status (needs mutual TLS or --tokens; default: anyone)")
      ->delimiter(',');
  cmd->add_option("--keep-checkpoints", f->keep_checkpoints,
                  "Keep the model files of the newest N versions (and version 0); older ones are deleted after "
                  "each commit (0: keep all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--keep-every", f->keep_every, "Also keep every K-th version's model (0: none)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--dashboard-listen", f->dashboard_listen,
                  "Serve a live dashboard page (accuracy curve, progress, clients, refusals, last version) at "
                  "http://HOST:PORT/ (plain HTTP without authentication: loopback or a trusted network; default: off)");
  cmd->add_option("--metrics-listen", f->metrics_listen,
                  "Serve Prometheus metrics at http://HOST:PORT/metrics (default: off)");
  cmd->add_flag("--public-status", f->limits.public_status,
                "Answer the status to every caller, also when the server has mutual TLS or --tokens (default: "
                "only to callers with a valid certificate or token)");
  cmd->add_option("--tokens", f->tokens_file,
                  "Token authentication: file of 'CLIENT_NAME SHA256' lines (plexus tokens issue); clients "
                  "then need --token-file");
  cmd->add_option("--max-update-norm", f->limits.max_update_norm,
                  "Refuse updates whose L2 norm exceeds this (0: no bound)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--adaptive-norm-factor", f->limits.adaptive_norm_factor,
                  "Refuse updates whose L2 norm (trainable tensors) exceeds this many times the median of the "
                  "recent clients' latest update norms (before five clients have sent one: of the model's norm); "
                  "0: off. docs/security.md states what it guarantees")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--rate-limit", f->limits.requests_per_s, "Requests per second allowed per client (0: no limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--max-long-polls", f->limits.max_long_polls,
                  "Polls in progress at once (each waiting poll holds a server thread); more are told to retry "
                  "(0 = no bound; the threads of all calls are capped from this and the upload places)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--max-concurrent-uploads", f->limits.max_concurrent_uploads,
                  "Uploads received and decoded at once (the others wait; bounds server memory; 0: no bound)")
      ->capture_default_str();
  cmd->add_option("--upload-slot-wait-ms", f->limits.upload_slot_wait_ms,
                  "Refuse an upload (RESOURCE_EXHAUSTED; the client retries) that waits longer than this for an "
                  "upload place (0: no bound)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--upload-stall-ms", f->limits.upload_stall_ms,
                  "Cancel an upload that delivers nothing for this long while holding an upload place; what "
                  "arrived is kept for a resume (0: no bound)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--upload-min-rate", f->limits.upload_min_bytes_per_s,
                  "Cancel an upload holding a place that delivers fewer bytes per second than this over any "
                  "--upload-rate-window-ms; its client then shares 3/4 of the places with other slow senders "
                  "(0: no minimum)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--upload-rate-window-ms", f->limits.upload_rate_window_ms,
                  "The window over which --upload-min-rate is measured")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option_function<std::string>(
         "--flow-control", [f](const std::string& v) { f->limits.adaptive_flow_control = v == "adaptive"; },
         "How far ahead of the server each upload may send: adaptive (windows follow the link's "
         "bandwidth-delay product; for clients over long round trips) or fixed (64 KB windows: far less "
         "memory per waiting upload and less CPU on a LAN or one machine)")
      ->check(CLI::IsMember({"adaptive", "fixed"}))
      ->default_str("adaptive");
  cmd->add_option("--rate-burst", f->limits.burst, "Requests a client may make at once above its rate")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_flag("--insecure", f->insecure, "Allow listening on a non-loopback address without TLS");
  cmd->add_option("--threads", f->threads, "LibTorch threads for evaluation")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  AddConfigOption(cmd);
  cmd->callback([f, cmd] {
    f->cmd = cmd;
    DefaultDataForModel(f->model, f->loss, &f->data);
    RunServer(*f);
  });
}

}  // namespace plexus::cli
