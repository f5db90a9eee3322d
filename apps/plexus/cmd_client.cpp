#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <limits>
#include <thread>

#include "apps/plexus/client_tls_flags.h"
#include "apps/plexus/commands.h"
#include "apps/plexus/local_dp_flag.h"
#include "apps/plexus/model_choice.h"
#include "client/client_runtime.h"
#include "client/failover_transport.h"
#include "client/grpc_transport.h"
#include "compute/fashion_mnist.h"
#include "compute/partition.h"
#include "compute/portable_trainer.h"
#include "edge/device_policy.h"
#include "privacy/rdp_accountant.h"

namespace plexus::cli {
namespace {

// --server's comma-separated addresses; CommandError when none. With `shards` > 0, the one
// address holds "{shard}" and becomes `shards` addresses, the client's own shard first (FNV-1a of
// its id, modulo shards: the same edge every time, docs/deployment.md), then the next ones in
// order as its fallbacks.
std::vector<std::string> ServerAddresses(const std::string& list, int shards, const std::string& client_id) {
  std::vector<std::string> servers = SplitAddresses(list);
  if (servers.empty()) throw CommandError("--server: no address given");
  if (shards == 0) return servers;
  if (servers.size() != 1) throw CommandError("--shards needs one --server address holding {shard}");
  return Take(ShardAddresses(servers[0], shards, client_id), "--shards");
  return servers;
}

struct ClientFlags {
  std::string server = "127.0.0.1:50051";
  double failover_after_s = 5;
  int shards = 0;
  std::string model;  // empty: the built-in model the server names
  std::string loss = "cross_entropy";
  bool local_buffers = false;
  double federated_eval_split = 0;
  std::string dp;  // --dp local:clip=C,noise=Z
  std::string data_dir = kDefaultFashionMnistDir;
  DataFlags data;
  std::string partition = "iid";
  int64_t num_partitions = 1;
  int64_t partition_index = 0;
  uint64_t seed = 0;
  std::string client_id;
  double give_up_s = 300;
  double slowdown = 1.0;
  std::string tls_ca, tls_cert, tls_key;
  std::string token_file;
  int threads = 1;
#if PLEXUS_WITH_TORCH
  std::string trainer = "torch";
#else
  std::string trainer = "portable";  // this build has no LibTorch
#endif
  edge::DeviceConditions device;
  double device_check_s = 5;
  std::string state_dir;
  std::string save_updates;
  std::string quit_at_secagg_stage;
  double max_upload_kib_s = 0;
};

void RunClient(const ClientFlags& f) {
  InstallStopHandlers();
  if (f.partition_index < 0 || f.partition_index >= f.num_partitions) {
    throw CommandError("--partition-index must lie in [0, " + std::to_string(f.num_partitions) + ")");
  }
  PartitionSpec spec = Take(PartitionSpec::Parse(f.partition), "--partition");
  // Only the client's partition is kept (converted to floats): a device must not hold the whole
  // data set.
  std::optional<ModelChoice> model;
  if (!f.model.empty()) model.emplace(f.model, f.loss);
  if (f.loss != "cross_entropy" && !model) throw CommandError("--loss mse needs --model PATH.pt (the server's)");
  if (f.local_buffers && !(model && model->is_script())) {
    throw CommandError("--local-buffers keeps a TorchScript model's buffers local: it needs --model PATH.pt");
  }
  Dataset train =
      LoadData(f.data, model && model->regression(), f.data_dir, Split::kTrain,
               [&](const std::vector<uint8_t>& labels) -> Result<std::vector<uint32_t>> {
                 PLEXUS_ASSIGN_OR_RETURN(auto parts, PartitionIndices(labels, spec, f.num_partitions, f.seed));
                 return std::move(parts[static_cast<size_t>(f.partition_index)]);
               });
  Dataset held_out;
  if (f.federated_eval_split > 0) {  // the server's evaluation tasks run on this share of the partition
    HeldOut split = Take(HoldOut(train, f.federated_eval_split, f.seed ^ static_cast<uint64_t>(f.partition_index)),
                         "--federated-eval-split");
    train = std::move(split.kept);
    held_out = std::move(split.held_out);
  }
  // A user's model meets the data at start, not at the first task: one example through it. The
  // trainer that did it is the one the runtime trains with (a model file is loaded once).
  std::unique_ptr<Trainer> script_trainer;
  if (model && model->is_script() && train.size() > 0) {
    Result<std::unique_ptr<Trainer>> made = model->MakeTrainer(f.threads, f.trainer == "portable", f.local_buffers);
    Result<Evaluation> probe = made.ok() ? (*made)->Evaluate(model->Initial(f.seed), DatasetView::Prefix(train, 1))
                                         : Result<Evaluation>(made.status());
    if (probe.ok()) script_trainer = std::move(made).value();
    if (!probe.ok()) {
      throw CommandError("--model " + f.model + " cannot run on " +
                         (f.data.given()
                              ? "--data " + f.data.data
                              : std::string("Fashion-MNIST (the built-in models' data: no --data was given)")) +
                         ": " + probe.status().message() +
                         "; give --data FILE with the examples the model takes (and --input-shape if it needs another "
                         "shape)");
    }
  }
  DatasetView local = DatasetView::All(train);
  spdlog::info("partition {} of {} ({}): {} examples{}", f.partition_index, f.num_partitions, spec.ToString(),
               local.size(),
               held_out.size() ? ", " + std::to_string(held_out.size()) + " more held out for evaluation" : "");

  const LocalDp local_dp = f.dp.empty() ? LocalDp{} : ParseLocalDp(f.dp);
  ClientOptions o;
  o.local_dp_clip = local_dp.clip;
  o.local_dp_noise = local_dp.noise;
  if (held_out.size() > 0) o.eval_data = DatasetView::All(held_out);
  o.client_id = f.client_id;
  o.device = std::to_string(std::thread::hardware_concurrency()) + " cores";
  o.give_up_after_ms = static_cast<int64_t>(f.give_up_s * 1000);
  o.slowdown = f.slowdown;
  o.save_updates_dir = f.save_updates;
  o.quit_at_secure_stage = f.quit_at_secagg_stage;
  o.seed = f.seed ^ static_cast<uint64_t>(f.partition_index + 1) * 0x9e3779b97f4a7c15ULL;
  if (f.device.any()) {
    const edge::DeviceConditions conditions = f.device;
    o.device_blocked = [conditions] { return edge::WhyNotNow(conditions); };
    o.device_check_ms = static_cast<int64_t>(f.device_check_s * 1000);
    const edge::DeviceState now = edge::ReadDeviceState(conditions.sysfs_root, conditions.procfs_root);
    spdlog::info("device policy on: battery {}, {}, hottest zone {}, default route via {}",
                 now.has_battery ? std::to_string(static_cast<int>(now.battery_pct)) + "%" : "none (mains)",
                 now.charging ? "charging" : "discharging",
                 now.max_temp_c ? std::to_string(*now.max_temp_c) + " C" : "unknown",
                 now.route_interfaces.empty() ? "nothing" : now.route_interfaces.front());
  }
  const std::vector<std::string> servers = ServerAddresses(f.server, f.shards, f.client_id);
  if (f.shards > 0) spdlog::info("client {}: server {} (its shard of {})", f.client_id, servers[0], f.shards);
  RealClock clock;
  const ClientTls tls = ClientTlsFromFiles({f.tls_ca, f.tls_cert, f.tls_key, f.token_file}, servers, "--");
  std::unique_ptr<ClientStateDir> state;
  if (!f.state_dir.empty()) {
    state = Take(ClientStateDir::Open(f.state_dir), "--state-dir");
    o.state = state.get();
  }
  LinkLimits limits;
  limits.max_upload_bytes_per_s = static_cast<int64_t>(f.max_upload_kib_s * 1024);
  std::unique_ptr<FederationTransport> transport = std::make_unique<FailoverTransport>(
      servers,
      [tls, limits, dp = local_dp.announced](const std::string& address) {
        return MakeGrpcFederationTransport(address, tls, limits, dp);
      },
      static_cast<int64_t>(f.failover_after_s * 1000), &clock);
  const int threads = f.threads;
  const bool portable = f.trainer == "portable";
  const bool local_buffers = f.local_buffers;
  ClientRuntime runtime(
      o, transport.get(),
      [&model, &script_trainer, threads, portable,
       local_buffers](const std::string& announced) -> Result<std::unique_ptr<Trainer>> {
        PLEXUS_RETURN_IF_ERROR(CheckServerModel(model ? &*model : nullptr, announced));
        if (script_trainer) return std::move(script_trainer);  // the one that passed the start-up check
        if (model && model->is_script()) return model->MakeTrainer(threads, portable, local_buffers);
        return ModelChoice(announced).MakeTrainer(threads, portable);
      },
      local);
  // The runtime checks the stop flag between steps; this watcher cancels the call in progress
  // (a long poll, a download or an upload, which keeps its partial state on the server for a resume)
  // so that a signal ends the client within a fraction of a second. It sleeps in poll() until a
  // signal or the runtime's end wakes it (a device's client would otherwise wake 50 times a
  // second for nothing); without the signal pipe it looks every 20 ms.
  int done_pipe[2] = {-1, -1};
  if (::pipe2(done_pipe, O_CLOEXEC) != 0) done_pipe[0] = done_pipe[1] = -1;
  std::atomic<bool> runtime_done{false};
  std::thread stop_watcher([&] {
    pollfd watched[2] = {{StopSignalFd(), POLLIN, 0}, {done_pipe[0], POLLIN, 0}};
    const int wait_ms = watched[0].fd >= 0 && watched[1].fd >= 0 ? -1 : 20;
    while (!runtime_done.load()) {
      if (StopRequested().load()) {
        transport->Shutdown();
        return;
      }
      ::poll(watched, 2, wait_ms);  // negative descriptors are ignored; EINTR just looks again
    }
  });
  Result<ClientSummary> summary = runtime.Run(&StopRequested());
  runtime_done.store(true);
  if (done_pipe[1] >= 0) {
    const char byte = 1;
    [[maybe_unused]] const ssize_t written = ::write(done_pipe[1], &byte, 1);
  }
  stop_watcher.join();
  for (int fd : done_pipe) {
    if (fd >= 0) ::close(fd);
  }
  if (!summary.ok() && summary.status().code() == StatusCode::kCancelled && StopRequested().load()) {
    spdlog::info("stopped on signal (client {}); run the same command again to continue{}",
                 o.client_id.empty() ? "unnamed" : o.client_id, state ? " from what " + f.state_dir + " keeps" : "");
    return;
  }
  if (!summary.ok() && summary.status().code() == StatusCode::kUnavailable) {
    throw CommandError(
        "cannot reach the server at " + f.server + " (" + summary.status().message() +
        "). Check: is `plexus server` running and listening there (its --listen)? Is TLS on at both ends or "
        "at neither (--tls-ca here, --tls-cert/--tls-key there)? With TLS, does the server's certificate name "
        "the host you connect to (a certificate for 'localhost' does not match 127.0.0.1: connect to localhost:PORT, "
        "or issue it with plexus certs issue --server 127.0.0.1)?");
  }
  ClientSummary s = Take(std::move(summary), "client");
  spdlog::info(
      "client {} done: {} tasks completed, {} refused, {} dropped (training diverged), {} model downloads, {} "
      "evaluations",
      s.client_id, s.tasks_completed, s.tasks_refused, s.tasks_failed, s.downloads, s.evaluations);
  if (local_dp.clip > 0) {
    // Against the server, each noised update is the Gaussian mechanism on this client's data with
    // sensitivity 2C (any two clipped updates lie within 2C of each other): noise multiplier Z/2.
    const int64_t releases = runtime.local_dp_releases();
    const double epsilon = LocalDpEpsilon(local_dp, releases);
    spdlog::info(
        "local DP: {} noised updates left this client (clip {}, noise multiplier {}): epsilon {} at delta "
        "1e-05 against whoever sees them",
        releases, local_dp.clip, local_dp.noise, releases == 0 ? "0" : fmt::format("{:.4g}", epsilon));
  }
}

}  // namespace

void AddClientCommand(CLI::App& app) {
  auto f = std::make_shared<ClientFlags>();
  CLI::App* cmd = app.add_subcommand("client", "Run a training client against a plexus server");
  cmd->add_option("--server", f->server,
                  "Server address, HOST:PORT; a comma-separated list: the others (and the fallbacks the server "
                  "names at join, plexus server --fallback) are turned to when the one in use stops answering")
      ->capture_default_str();
  cmd->add_option("--shards", f->shards,
                  "Servers sharded by client id: --server holds {shard}, replaced by this client's shard in "
                  "[0, N) (a hash of --client-id), the others following as fallbacks; 0: off")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  cmd->add_option("--failover-after-s", f->failover_after_s,
                  "With more than one server: turn to the next once the one in use has not answered for this long")
      ->capture_default_str();
  cmd->add_option("--model", f->model,
                  "The server's TorchScript model file (PATH.pt), when it federates one; a built-in model (mlp, cnn) "
                  "needs no flag: the client trains what the server names");
  AddLossFlag(cmd, &f->loss);
  cmd->add_flag("--local-buffers", f->local_buffers,
                "Keep the TorchScript model's buffers (BatchNorm statistics) local to this client (FedBN): they are "
                "not sent and the client trains and evaluates with its own");
  cmd->add_option("--data-dir", f->data_dir, "Directory with the Fashion-MNIST IDX files")->capture_default_str();
  AddDataFlags(cmd, &f->data, "This client's training data (partitioned like Fashion-MNIST)");
  cmd->add_option("--federated-eval-split", f->federated_eval_split,
                  "Hold out this share of the partition (seeded) for the server's federated evaluation tasks; 0: "
                  "train on all of it and answer evaluation tasks with no examples")
      ->check(CLI::Range(0.0, 0.9))
      ->capture_default_str();
  cmd->add_option("--partition", f->partition, "iid, dirichlet:ALPHA or shards:S")->capture_default_str();
  cmd->add_option("--num-partitions", f->num_partitions, "Number of partitions the training set is split into")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--partition-index", f->partition_index, "This client's partition, in [0, num-partitions)")
      ->capture_default_str();
  cmd->add_option("--seed", f->seed, "Partition seed (same on every client) and batch order")->capture_default_str();
  cmd->add_option("--client-id", f->client_id, "Stable client id (default: assigned by the server)");
  cmd->add_option("--dp", f->dp,
                  "Local differential privacy, local:clip=C,noise=Z: clip each update to L2 norm C and add Gaussian "
                  "noise Z*C before it leaves (the server must run with the same --dp; docs/privacy.md)");
  cmd->add_option("--give-up-s", f->give_up_s, "Give up after this many seconds of continuous failures")
      ->capture_default_str();
  cmd->add_option("--tls-ca", f->tls_ca, "CA certificate (PEM) that signed the server's certificate");
  cmd->add_option("--tls-cert", f->tls_cert, "This client's certificate (PEM); its name is the client's identity");
  cmd->add_option("--tls-key", f->tls_key, "This client's private key (PEM)");
  cmd->add_option("--token-file", f->token_file,
                  "File holding this client's token, for a server with token authentication (plexus tokens issue)");
  cmd->add_option("--slowdown", f->slowdown, "Make each task take this many times as long as training did (>= 1)")
      ->check(CLI::Range(1.0, 1000.0))
      ->capture_default_str();
  cmd->add_option("--threads", f->threads, "LibTorch threads")->check(CLI::Range(1, 256))->capture_default_str();
  cmd->add_flag("--require-charging", f->device.require_charging, "Train only while the device charges");
  cmd->add_option("--min-battery", f->device.min_battery_pct, "Train only with the battery at this percentage or more")
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--max-temp-c", f->device.max_temp_c, "Train only while every thermal zone is at this or cooler")
      ->check(CLI::Range(0.0, 150.0));
  cmd->add_flag("--unmetered-only", f->device.unmetered_only,
                "Train only when the default route is not cellular or tethered (wwan, rmnet, ppp, usb)");
  cmd->add_option("--sysfs-root", f->device.sysfs_root, "Where sysfs is (for the device policy)")
      ->capture_default_str();
  cmd->add_option("--procfs-root", f->device.procfs_root, "Where procfs is (for the device policy)")
      ->capture_default_str();
  cmd->add_option("--device-check-s", f->device_check_s, "While the device policy says no, check again this often")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  cmd->add_option("--state-dir", f->state_dir,
                  "Keep the client's id, model and unsent update here, so that a restarted client resumes its "
                  "download or upload instead of starting over (default: memory only)");
  cmd->add_option("--save-updates", f->save_updates,
                  "Keep a copy of every update this client makes (its delta, float32 safetensors named "
                  "TASK.nEXAMPLES.safetensors) in this directory, for your own audit");
  cmd->add_option("--quit-at-secagg-stage", f->quit_at_secagg_stage,
                  "Fault injection for tests of secure aggregation: stop at this stage of a group without sending "
                  "its message, as a device dying there would")
      ->check(CLI::IsMember({"advertise keys", "share keys", "masked input", "unmask"}));
  cmd->add_option("--max-upload-kib-s", f->max_upload_kib_s,
                  "Pace uploads to at most this many KiB per second, for slow or metered links (0: no limit)")
      ->check(CLI::Range(0.0, 1e9))
      ->capture_default_str();
#if PLEXUS_WITH_TORCH
  cmd->add_option("--trainer", f->trainer,
                  "torch (LibTorch) or portable (plain C++, the same bits on every architecture; slower)")
      ->check(CLI::IsMember({"torch", "portable"}))
      ->capture_default_str();
#else
  cmd->add_option("--trainer", f->trainer,
                  "portable (plain C++, the same bits on every architecture): this build has no LibTorch")
      ->check(CLI::IsMember({"portable"}))
      ->capture_default_str();
#endif
  AddConfigOption(cmd);
  cmd->callback([f] {
    DefaultDataForModel(f->model, f->loss, &f->data);
    RunClient(*f);
  });
}

}  // namespace plexus::cli
