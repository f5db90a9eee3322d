#include <spdlog/spdlog.h>

#include <fcntl.h>

#include <cstdio>
#include <utility>

#include "aggregators/registry.h"
#include "apps/plexus/accuracy_plot.h"
#include "apps/plexus/commands.h"
#include "apps/plexus/dp_flags.h"
#include "apps/plexus/gossip_sim_command.h"
#include "apps/plexus/help_lists.h"
#include "apps/plexus/model_choice.h"
#include "apps/plexus/run_estimate.h"
#include "apps/plexus/run_summary.h"
#include "apps/plexus/shared_flags.h"
#include "apps/plexus/slow_link_checks.h"
#include "apps/plexus/test_set_evaluator.h"
#include "compression/codec.h"
#include "compute/fashion_mnist.h"
#include "compute/model_zoo.h"
#include "compute/script_model.h"
#include "compute/text_corpus.h"
#include "core/model_state.h"
#include "core/safetensors.h"
#include "server/coordinator/engine_factory.h"
#include "simulations/attack.h"
#include "simulations/client_data.h"
#include "simulations/crdt_sim.h"
#include "simulations/mpi_task_runner.h"
#include "simulations/pipe_trainer.h"
#include "simulations/sim_runner.h"

namespace plexus::cli {
namespace {

struct SimFlags {
  SimOptions sim;
  std::string partition = "iid";
  std::string data_dir = kDefaultFashionMnistDir;
  DataFlags data;
  std::string loss = "cross_entropy";
  double test_split = 0.1;  // with --data: the share held out as the test set
  std::string metrics_out;
  std::string summary_out;
  std::string model_out;
  size_t train_subset = 0;
  size_t test_subset = 0;
  int threads = 1;
  const CLI::App* cmd = nullptr;  // to ask which flags were given
  CrdtSimOptions crdt;
  int64_t crdt_replicas = 0;
  std::string devices;  // a named DeviceModel profile; explicit device flags override its fields
  std::string plot;     // PNG of accuracy against round and virtual time
  bool dry_run = false;
  bool gossip_mode = false;  // --mode gossip
  GossipFlags gossip;
  DpFlags dp;
  std::string secagg;        // --secagg's parameters (given: cmd->count("--secagg"))
  std::string trainer_pipe;  // --trainer-pipe IN,OUT: the caller trains (plexus.sim(train=...) from Python)
};

// The two descriptors of --trainer-pipe IN,OUT, open in this process.
std::pair<int, int> TrainerPipeOf(const std::string& text) {
  int in = -1, out = -1;
  char rest = 0;
  if (std::sscanf(text.c_str(), "%d,%d%c", &in, &out, &rest) != 2 || in < 0 || out < 0) {
    throw CommandError("--trainer-pipe takes IN,OUT: two file descriptors (got '" + text + "')");
  }
  for (int fd : {in, out}) {
    if (::fcntl(fd, F_GETFD) < 0) {
      throw CommandError("--trainer-pipe: file descriptor " + std::to_string(fd) + " is not open in this process");
    }
  }
  return {in, out};
}

// The device flags, each a field of DeviceModel: given on the command line (or in a scenario),
// they override the named profile's value.
template <typename T>
struct DeviceFlag {
  const char* name;
  T DeviceModel::*field;
  const char* help;
};
constexpr DeviceFlag<double> kDeviceDoubles[] = {
    {"--ms-per-step", &DeviceModel::ms_per_step,
     "Milliseconds per local step: the fastest device (geometric spread) or the median (log-normal)"},
    {"--speed-ratio", &DeviceModel::speed_ratio, "Slowest / fastest device; times per step spread geometrically"},
    {"--speed-sigma", &DeviceModel::speed_sigma,
     "Log-normal spread of the times per step (replaces --speed-ratio when > 0)"},
    {"--latency-ms", &DeviceModel::latency_ms, "Network latency per transfer (one download, one upload per task)"},
    {"--down-mbps", &DeviceModel::down_mbps, "Download bandwidth in Mbit/s (0 = unlimited)"},
    {"--up-mbps", &DeviceModel::up_mbps, "Upload bandwidth in Mbit/s (0 = unlimited)"},
    {"--bandwidth-sigma", &DeviceModel::bandwidth_sigma,
     "Log-normal spread of the clients' bandwidths around --down-mbps/--up-mbps (0 = all alike)"},
    {"--dropout", &DeviceModel::dropout, "Probability that a device abandons a task"},
    {"--mean-on-s", &DeviceModel::mean_on_s, "Availability: mean length of a device's on periods (0 = always on)"},
    {"--mean-off-s", &DeviceModel::mean_off_s, "Availability: mean length of a device's off periods"},
};

std::string DescribeDevices(const DeviceModel& d, double server_mbps) {
  char buf[400];
  int len =
      d.speed_sigma > 0
          ? std::snprintf(buf, sizeof buf, "%g ms per step (median, log-normal sigma %g)", d.ms_per_step, d.speed_sigma)
          : std::snprintf(buf, sizeof buf, "%g..%g ms per step", d.ms_per_step, d.ms_per_step * d.speed_ratio);
  if (d.down_mbps > 0 || d.up_mbps > 0 || d.latency_ms > 0) {
    len += std::snprintf(buf + len, sizeof buf - static_cast<size_t>(len), ", %g/%g Mbit/s down/up, %g ms latency",
                         d.down_mbps, d.up_mbps, d.latency_ms);
    if (d.bandwidth_sigma > 0) {
      len += std::snprintf(buf + len, sizeof buf - static_cast<size_t>(len), " (bandwidth log-normal sigma %g)",
                           d.bandwidth_sigma);
    }
  }
  if (d.dropout > 0) len += std::snprintf(buf + len, sizeof buf - static_cast<size_t>(len), ", %g dropout", d.dropout);
  if (d.mean_on_s > 0) {
    len += std::snprintf(buf + len, sizeof buf - static_cast<size_t>(len), ", on %g s / off %g s", d.mean_on_s,
                         d.mean_off_s);
  }
  if (server_mbps > 0)
    std::snprintf(buf + len, sizeof buf - static_cast<size_t>(len), ", server link %g Mbit/s", server_mbps);
  return buf;
}

// `plexus sim --crdt-replicas N`: the CRDT convergence simulation instead of a federation.
void RunCrdtSim(const SimFlags& f) {
  CrdtSimOptions o = f.crdt;
  o.replicas = f.crdt_replicas;
  o.seed = f.sim.seed;
  std::printf("plexus sim: %lld CRDT replicas, %lld contributions, %lld orderings%s, seed %llu\n",
              static_cast<long long>(o.replicas), static_cast<long long>(o.contributions),
              static_cast<long long>(o.orderings), o.partition_heal ? ", partition then heal" : "",
              static_cast<unsigned long long>(o.seed));
  std::fflush(stdout);
  std::vector<CrdtOrdering> results = Take(RunCrdtSimulation(o, [&](const CrdtOrdering& r) {
    std::printf(
        "ordering %3lld: replicas_identical=%s  gossip_rounds=%lld  converged_s=%.1f  messages=%lld  "
        "mbytes=%.2f  lost=%lld  merkle_node_hashes=%lld  live=%lld ",
        static_cast<long long>(r.ordering), r.identical ? "true" : "false", static_cast<long long>(r.gossip_rounds),
        r.converged_s, static_cast<long long>(r.messages), static_cast<double>(r.bytes) / 1e6,
        static_cast<long long>(r.messages_lost), static_cast<long long>(r.node_hashes), static_cast<long long>(r.live));
    for (size_t i = 0; i < r.hashes.size(); ++i) {
      std::printf(" %s=%s", o.strategies[i].c_str(), r.hashes[i].substr(0, 12).c_str());
    }
    std::printf("\n");
    std::fflush(stdout);
  }));
  // Identical within every ordering, and the same across orderings (the final set is the same).
  bool identical = true;
  for (const CrdtOrdering& r : results) identical = identical && r.identical && r.hashes == results[0].hashes;
  std::string all;
  for (const std::string& h : results[0].hashes) all += h;
  std::printf("replicas_identical=%s hash=%s\n", identical ? "true" : "false", Sha256Hex(all).c_str());
  if (!identical) throw CommandError("replicas diverged");
}

void RunFederationSim(const SimFlags& f, const MpiSession* mpi);

void RunSim(const SimFlags& f) {
  if (f.crdt_replicas > 0) {
    if (LaunchedWithSeveralMpiRanks()) throw CommandError("--crdt-replicas runs in one process, not under mpirun");
    return RunCrdtSim(f);
  }
  if (!LaunchedWithSeveralMpiRanks()) return RunFederationSim(f, nullptr);
#if PLEXUS_WITH_MPI
  std::unique_ptr<MpiSession> mpi = Take(MpiSession::Start(), "mpirun");
  try {
    RunFederationSim(f, mpi.get());
  } catch (const std::exception& e) {
    mpi->Abort(e.what());
  }
#else
  throw CommandError("started by mpirun, but this plexus was built without MPI (install libopenmpi-dev and rebuild)");
#endif
}

// The devices: the named --devices profile with the device flags given on top, or the flags.
DeviceModel DevicesFor(const SimFlags& f) {
  if (f.devices.empty()) return f.sim.devices;
  DeviceModel p = Take(DeviceModel::Profile(f.devices), "--devices");
  for (const DeviceFlag<double>& d : kDeviceDoubles) {
    if (f.cmd->count(d.name)) p.*d.field = f.sim.devices.*d.field;
  }
  if (f.cmd->count("--task-overhead-ms")) p.task_overhead_ms = f.sim.devices.task_overhead_ms;
  return p;
}

// --mode gossip: the shared flags (nodes, rounds, model, seed, local training, devices, attack,
// outputs) and the gossip flags.
void RunGossip(const SimFlags& f, const MpiSession* mpi) {
  if (f.cmd->count("--codec") || f.cmd->count("--download-codec")) {
    throw CommandError(
        "--codec and --download-codec are for server modes; compressed gossip is --gossip choco:codec=NAME[,gamma=G] "
        "(CHOCO-gossip: "
        "nodes send compressed changes of public copies, which still reach consensus; plain averaging of "
        "compressed models does not)");
  }
  for (const char* server_only :
       {"--clients-per-round", "--strategy", "--min-clients", "--round-deadline-s", "--buffer-size", "--server-lr",
        "--server-mbps", "--max-tasks", "--backup-workers", "--dp", "--dp-population", "--dp-budget", "--dp-delta",
        "--secagg", "--secagg-dropout", "--edges"}) {
    if (f.cmd->count(server_only)) {
      throw CommandError(std::string(server_only) + " belongs to the server modes; --mode gossip has no server");
    }
  }
  if (!f.trainer_pipe.empty()) {
    throw CommandError(
        "--trainer-pipe trains the clients of the server modes; gossip nodes train on the simulator's own");
  }
  GossipRun run;
  GossipSimOptions& o = run.options;
  o.nodes = f.sim.clients;
  o.rounds = f.sim.sync.rounds;
  o.model = f.sim.model;
  o.partition = Take(PartitionSpec::Parse(f.partition), "--partition");
  o.seed = f.sim.seed;
  o.task = f.sim.sync.task;
  o.devices = DevicesFor(f);
  o.examples_per_client = f.sim.examples_per_client;
  o.attack = f.sim.attack;
  o.attackers = f.sim.attackers;
  run.data_dir = f.data_dir;
  run.loss = f.loss;
  run.data = f.data;
  run.test_split = f.test_split;
  run.metrics_out = f.metrics_out;
  run.summary_out = f.summary_out;
  run.model_out = f.model_out;
  run.plot = f.plot;
  run.train_subset = f.train_subset;
  run.test_subset = f.test_subset;
  run.threads = f.threads;
  run.dry_run = f.dry_run;
  run.cmd = f.cmd;
  RunGossipSim(std::move(run), f.gossip, mpi);
}

// The federation on rank 0 (or alone); with `mpi`, ranks above 0 only train.
void RunFederationSim(const SimFlags& f, const MpiSession* mpi) {
  if (f.gossip_mode) {
    return RunGossip(f, mpi);
  }
  const bool training_rank = mpi && mpi->rank() > 0;
  SimOptions options = f.sim;
  options.partition = Take(PartitionSpec::Parse(f.partition), "--partition");
  // --dp: the strategy becomes dp_fedavg (dp_ftrl for a tree) with noise from a seeded stream (reproducible runs; the
  // summary names the source), the population is --clients.
  // --dp local: the virtual clients clip and noise as plexus client does; the strategy is unchanged.
  std::optional<LocalDp> local_dp;
  if (IsLocalDp(f.dp.dp)) {
    local_dp = ParseLocalDp(f.dp.dp);
    if (f.dp.budget != 0 || f.dp.population != 0) {
      throw CommandError(
          "--dp-budget and --dp-population are for central DP: with --dp local each client accounts for its own "
          "updates");
    }
    options.local_dp_clip = local_dp->clip;
    options.local_dp_noise = local_dp->noise;
  }
  std::optional<DpPlan> dp =
      local_dp ? std::nullopt
               : PlanDp(f.dp, options.mode == Mode::kAsync ? f.sim.async.buffer_size : options.sync.clients_per_round,
                        options.sync.rounds, options.clients, options.seed, f.cmd->count("--strategy") > 0);
  const int64_t rounds_asked = options.sync.rounds;
  if (f.cmd->count("--secagg") > 0) options.sync.secagg = Take(SecAggSettings::Parse(f.secagg), "--secagg");
  PlanDpWithSecAgg(&dp, &options.sync.secagg);
  std::map<std::string, std::string> derived;
  if (dp) derived = ApplyDpPlan(*dp, &options.sync.strategy, &options.sync.rounds);
  derived.merge(DefaultMinClients(*f.cmd, &options.sync));
  options.async = AsyncOptionsFor(options.mode, f.sim.async, options.sync, f.cmd);
  if (dp) options.async.strategy = dp->strategy;
  Check(EngineOptions{options.mode, options.sync, options.async}.Validate(), "invalid settings");
  options.devices = DevicesFor(f);
  Check(options.Validate(), "invalid settings");
  const ModelChoice model(f.sim.model, f.loss);  // a model file is read (and checked) before anything starts
  const std::string& strategy = options.mode == Mode::kSync ? options.sync.strategy : options.async.strategy;
  CheckSlowLinkSettings(strategy, options.sync.task, options.codec);
  Take(MakeAggregator(strategy, nullptr), "--strategy");
  if (!f.plot.empty()) CheckPlotterPresent();
  if (mpi && mpi->size() > 1 && options.sync.task.optimizer == "adamw") {
    throw CommandError(
        "--optimizer adamw keeps each client's moments in the simulator's process: run it without MPI ranks");
  }
  const bool caller_trains = !f.trainer_pipe.empty();
  std::pair<int, int> trainer_pipe{-1, -1};
  if (caller_trains) {  // a loop of the caller's trains, over the simulator's training set
    trainer_pipe = TrainerPipeOf(f.trainer_pipe);
    if (mpi) throw CommandError("--trainer-pipe and MPI ranks both say where training runs: choose one");
    if (Take(ParseAttack(options.attack), "--attack") == AttackKind::kLabelFlip) {
      throw CommandError(
          "--attack labelflip poisons the simulator's own trainer's data; a loop of yours reads its own");
    }
    if (f.data.given()) {
      throw CommandError(
          "--trainer-pipe: the training loop indexes the simulator's Fashion-MNIST training set, so "
          "--data is for the simulator's own trainers");
    }
  }

  const DeviceModel& dev = options.devices;
  if (!training_rank) {
    std::printf(
        "plexus sim: %s mode, %s, %lld clients%s, %lld versions, model %s, partition %s, seed %llu, "
        "devices: %s%s%s\n",
        std::string(ModeName(options.mode)).c_str(), strategy.c_str(), static_cast<long long>(options.clients),
        options.mode == Mode::kSync ? (", " + std::to_string(options.sync.clients_per_round) + " per round").c_str()
                                    : "",
        static_cast<long long>(options.sync.rounds), options.model.c_str(), options.partition.ToString().c_str(),
        static_cast<unsigned long long>(options.seed), DescribeDevices(dev, options.server_mbps).c_str(),
        options.attack == "none" ? ""
                                 : (", " + std::to_string(static_cast<int>(options.attackers * 100 + 0.5)) +
                                    "% attackers (" + options.attack + ")")
                                       .c_str(),
        (std::string(options.codec.empty() ? "" : ", uploads compressed with " + options.codec) +
         (options.download_codec.empty() ? "" : ", downloads compressed with " + options.download_codec))
            .c_str());
    if (mpi) std::printf("plexus sim: local training spread over %d MPI ranks\n", mpi->size());
    if (options.edges > 0) {
      std::printf(
          "plexus sim: %lld edge aggregators (%g Mbit/s, %g ms each) between the clients and the server; the "
          "server's bytes below are the edges' fetches and partial sums\n",
          static_cast<long long>(options.edges), options.edge_mbps, options.edge_latency_ms);
    }
    if (dp) PrintDpPlan(*dp, rounds_asked, f.dp.budget, "plexus sim");
    if (local_dp) {
      std::printf(
          "plexus sim: local DP: each honest client clips its update to %g and adds noise of standard deviation %g "
          "to every value before sending it (noise from seeded streams)\n",
          local_dp->clip, local_dp->noise * local_dp->clip);
    }
    std::fflush(stdout);
  }
  if (f.dry_run) {  // the settings are valid: what they resolved to, and nothing more
    if (!training_rank) PrintResolvedSettings(*f.cmd, derived);
    return;
  }
  if (model.is_script()) options.initial = std::make_shared<const ModelState>(model.Initial(options.seed));
  TrainAndTest sets = LoadTrainAndTest(f.data, model.regression(), f.data_dir, f.test_split, options.seed);
  Dataset& train = sets.train;
  Dataset& test = sets.test;
  if (f.train_subset) {
    train.KeepFirst(f.train_subset);
  }
  std::unique_ptr<Trainer> trainer = Take(model.MakeTrainer(f.threads, /*portable=*/false));
  if (!training_rank && !caller_trains) {  // long runs say so before they start
    const TaskHyperparams& hp = options.sync.task;
    int64_t steps =
        hp.StepsFor(ClientData::ExamplesPerClient(train.size(), options.clients, options.examples_per_client));
    if (options.mode == Mode::kSemiAsync) steps = (options.async.compass.q_min + options.async.compass.q_max) / 2;
    // Tasks per version: K in sync rounds, the buffer in async mode, about K per group in semiasync.
    const int64_t per_version =
        options.mode == Mode::kAsync ? options.async.buffer_size : options.sync.clients_per_round;
    int64_t tasks = options.sync.rounds * per_version;
    if (options.max_tasks > 0) tasks = std::min(tasks, options.max_tasks);
    PrintTrainingEstimate(MeasureMsPerStep(trainer.get(), model.Initial(options.seed), train, hp.batch_size), tasks,
                          steps, mpi ? mpi->size() : 1);
  }
#if PLEXUS_WITH_MPI
  if (training_rank) return Check(ServeMpiTrainingJobs(trainer.get(), train), "MPI training rank");
  std::unique_ptr<MpiTaskRunner> spread;
  if (mpi) spread = std::make_unique<MpiTaskRunner>(mpi, trainer.get(), &train);
#endif
  // The caller's loop trains the jobs; the simulator's own trainer still evaluates.
  std::unique_ptr<PipeTrainer> caller;
  if (caller_trains) {
    caller = std::make_unique<PipeTrainer>(trainer_pipe.first, trainer_pipe.second);
    Check(caller->SendLayout(model.Initial(options.seed), static_cast<int64_t>(train.size())), "--trainer-pipe");
  }
  LocalTaskRunner local(caller ? static_cast<Trainer*>(caller.get()) : trainer.get(), &train);
  TaskRunner* runner = &local;
#if PLEXUS_WITH_MPI
  if (spread) runner = spread.get();
#endif
  TestSetEvaluator evaluator(trainer.get(), DatasetView::Prefix(test, f.test_subset));

  const bool language = model.language();
  SimResult result = Take(RunSimulation(options, train, runner, &evaluator, [&](const SimRound& r) {
    // ETA from the real time per version so far (the first versions include the setup).
    const double done = static_cast<double>(r.record.model_version);
    const double eta = done > 0 ? r.wall_time_s / done * (static_cast<double>(options.sync.rounds) - done) : 0.0;
    // With secure aggregation the server (and so the record) has no client's training loss.
    char loss[32] = "-";
    if (!options.sync.secagg) std::snprintf(loss, sizeof loss, "%.4f", r.record.mean_train_loss);
    char bits[48] = "";  // a language model's test loss per character
    if (language && r.record.test_loss) {
      std::snprintf(bits, sizeof bits, "test_bits_per_char %.3f  ", BitsPerChar(*r.record.test_loss));
    }
    std::printf(
        "round %3llu/%lld  updates %lld  train_loss %s  test_accuracy %.4f  test_loss %.4f  "
        "%svirtual %.1f s  real %.1f s  eta %.0f s%s\n",
        static_cast<unsigned long long>(r.record.round), static_cast<long long>(options.sync.rounds),
        static_cast<long long>(r.record.num_updates), loss, r.record.test_accuracy.value_or(0.0),
        r.record.test_loss.value_or(0.0), bits, r.virtual_time_s, r.wall_time_s, eta,
        dp ? ("  " + DpEpsilonText(*dp, static_cast<int64_t>(r.record.model_version))).c_str() : "");
    std::fflush(stdout);
  }));
  std::printf(
      "final test accuracy %.4f after %zu versions, %.1f s of virtual time, %.1f s real "
      "(%lld tasks trained, %lld dropped, %lld updates refused, peak memory %.0f MiB; model sha256 %s)\n",
      result.final_test_accuracy, result.rounds.size(), result.virtual_time_s, result.wall_time_s,
      static_cast<long long>(result.tasks_trained), static_cast<long long>(result.tasks_dropped),
      static_cast<long long>(result.updates_refused), static_cast<double>(PeakRssBytes()) / (1 << 20),
      result.final_model_sha256.c_str());

  if (result.secagg) {
    const SimResult::SecureAggregation& g = *result.secagg;
    std::printf(
        "secure aggregation: %lld groups published, %lld aborted; %lld members finished, %lld dropped, %lld left "
        "out; per member and round beyond training %.2f ms CPU (at most %.2f), %.0f key bytes and %.0f masked "
        "bytes sent; unmasking at most %.1f ms (the server's longest call %.1f ms)\n",
        static_cast<long long>(g.groups_done), static_cast<long long>(g.groups_aborted),
        static_cast<long long>(g.members_done), static_cast<long long>(g.members_dropped),
        static_cast<long long>(g.members_failed), g.member_cpu_ms, g.member_cpu_ms_max, g.key_bytes_per_member,
        g.masked_bytes_per_member, g.unmask_ms_max, g.server_call_ms_max);
  }
  RunSummary s;
  s.mode = ModeName(options.mode);
  s.model = options.model;
  s.language_model = model.language();
  if (s.language_model) s.unigram_bits_per_char = UnigramBitsPerChar(test);
  s.strategy = result.strategy;
  s.partition = options.partition.ToString();
  s.clients = options.clients;
  s.clients_per_round = options.sync.clients_per_round;
  s.seed = options.seed;
  for (const SimRound& r : result.rounds) {
    s.updates_accepted += r.record.num_updates;
    s.rounds.push_back(r.record);
    s.round_wall_time_s.push_back(r.wall_time_s);
    s.round_virtual_time_s.push_back(r.virtual_time_s);
    s.round_bytes_down.push_back(r.bytes_down);
    s.round_bytes_up.push_back(r.bytes_up);
  }
  s.model_version = result.model_version;
  s.final_model_sha256 = result.final_model_sha256;
  s.wall_time_s = result.wall_time_s;
  s.virtual_time_s = result.virtual_time_s;
  s.updates_refused = result.updates_refused;
  s.tasks_trained = result.tasks_trained;
  s.waits_after_refusals = result.waits_after_refusals;
  if (result.secagg) {
    const SimResult::SecureAggregation& g = *result.secagg;
    RunSummary::SecureAggregation out;
    out.groups_done = g.groups_done;
    out.groups_aborted = g.groups_aborted;
    out.members_done = g.members_done;
    out.members_dropped = g.members_dropped;
    out.members_failed = g.members_failed;
    out.member_cpu_ms = g.member_cpu_ms;
    out.member_cpu_ms_max = g.member_cpu_ms_max;
    out.server_call_ms_max = g.server_call_ms_max;
    out.unmask_ms_max = g.unmask_ms_max;
    out.key_bytes_per_member = g.key_bytes_per_member;
    out.masked_bytes_per_member = g.masked_bytes_per_member;
    s.secagg = out;
  }
  if (local_dp) {
    s.privacy =
        LocalDpReport(*local_dp, result.local_dp_most_releases, "seeded(seed=" + std::to_string(options.seed) + ")");
    std::printf(
        "plexus sim: local DP: at most %lld noised updates from one client: epsilon %.4g at delta %g against "
        "whoever sees them\n",
        static_cast<long long>(result.local_dp_most_releases), s.privacy->epsilon, s.privacy->delta);
  }
  if (dp) {
    s.privacy = DpReport(*dp, s.rounds, rounds_asked);
    if (s.privacy->stopped_by_budget) {
      std::printf("plexus sim: stopped at the privacy budget: epsilon %.4g of --dp-budget %g after %zu versions\n",
                  s.privacy->epsilon, f.dp.budget, s.rounds.size());
    }
  }
  if (!f.metrics_out.empty()) Check(WriteMetricsCsv(f.metrics_out, s));
  if (!f.summary_out.empty()) Check(WriteSummaryJson(f.summary_out, s));
  if (!f.model_out.empty()) Check(WriteSafetensorsFile(f.model_out, result.final_model));
  if (!f.plot.empty()) {
    // The plot reads a metrics file: the one asked for, or one next to the picture.
    const std::string csv = f.metrics_out.empty() ? f.plot + ".csv" : f.metrics_out;
    if (f.metrics_out.empty()) Check(WriteMetricsCsv(csv, s));
    PlotAccuracy({csv}, f.plot);
    std::printf("plot written to %s\n", f.plot.c_str());
  }
}

}  // namespace

void AddSimCommand(CLI::App& app) {
  auto flags = std::make_shared<SimFlags>();
  flags->sim.sync.rounds = 20;
  flags->sim.sync.clients_per_round = 5;
  CLI::App* cmd = app.add_subcommand("sim",
                                     "Run a simulated federation in virtual time (virtual clients, no sockets; under "
                                     "mpirun the training is spread over the ranks)");
  cmd->add_option("--clients", flags->sim.clients, "Virtual clients (N); in gossip mode, nodes")->capture_default_str();
  cmd->add_option("--model", flags->sim.model, "Model: mlp, cnn, or a TorchScript file saved from PyTorch (PATH.pt)")
      ->capture_default_str();
  cmd->add_option("--partition", flags->partition, "iid, dirichlet:ALPHA or shards:S")->capture_default_str();
  cmd->add_option("--seed", flags->sim.seed, "Seed for init, partition, sampling and batches")->capture_default_str();
  AddModeFlags(cmd, &flags->sim.mode, &flags->sim.async, &flags->gossip_mode);
  AddGossipFlags(cmd, &flags->gossip);
  AddFederationFlags(cmd, &flags->sim.sync);
  AddDpFlags(cmd, &flags->dp);
  cmd->add_option("--min-clients", flags->sim.sync.min_clients,
                  "Fewest clients to start a round and to close it (M); left out: 2, or the fewest updates the "
                  "strategy takes per round")
      ->capture_default_str();
  cmd->add_option_function<double>(
         "--round-deadline-s",
         [flags](double s) { flags->sim.sync.round_deadline_ms = static_cast<int64_t>(s * 1000); },
         "sync: virtual seconds before a round's stragglers are dropped")
      ->check(CLI::PositiveNumber)
      ->default_str("300");
  for (const DeviceFlag<double>& d : kDeviceDoubles) {
    cmd->add_option(d.name, flags->sim.devices.*d.field, d.help)->capture_default_str();
  }
  cmd->add_option("--attack", flags->sim.attack,
                  "What malicious clients do, " + OneOf(AttackNames()) + " (ipm takes eps=E, alie z=Z)")
      ->capture_default_str();
  AddSecAggFlag(cmd, &flags->secagg);
  cmd->add_option("--secagg-dropout", flags->sim.secagg_dropout,
                  "With --secagg: the share of each round's members that drop out, each at a stage drawn uniformly")
      ->check(CLI::Range(0.0, 0.99))
      ->capture_default_str();
  cmd->add_option("--attackers", flags->sim.attackers, "Fraction of the clients that are malicious")
      ->capture_default_str();
  cmd->add_option("--codec", flags->sim.codec,
                  "Compress every upload, " + OneOf(CodecNames()) +
                      " e.g. int8:chunk=C, topk:ratio=R (error feedback), qsgd:levels=L; bytes counted as encoded "
                      "(default: float32 as is)");
  cmd->add_option("--download-codec", flags->sim.download_codec,
                  "Compress every download as plexus server --download-codec does (f32, fp16, bf16, int8[:chunk=C]): "
                  "the change from the model the client rebuilt last, else the whole model; clients train from what "
                  "they rebuild (default: float32)");
  cmd->add_option("--crdt-replicas", flags->crdt_replicas,
                  "Instead of a federation: simulate this many CRDT replicas merging the same contributions "
                  "(docs/crdt.md)");
  cmd->add_option("--orderings", flags->crdt.orderings, "CRDT simulation: random delivery orders to try")
      ->capture_default_str();
  cmd->add_flag("--partition-heal", flags->crdt.partition_heal,
                "CRDT simulation: split the replicas in two for a while, then heal the partition");
  cmd->add_option("--gossip-interval-ms", flags->crdt.gossip_interval_ms,
                  "CRDT simulation: virtual milliseconds between a replica's syncs")
      ->capture_default_str();
  cmd->add_option("--crdt-latency-ms", flags->crdt.latency_ms, "CRDT simulation: latency of each replica's link")
      ->capture_default_str();
  cmd->add_option("--crdt-mbps", flags->crdt.mbps,
                  "CRDT simulation: up and down bandwidth of each replica's link in Mbit/s (0 = unlimited)")
      ->capture_default_str();
  cmd->add_option("--crdt-contributions", flags->crdt.contributions, "CRDT simulation: contributions (one per author)")
      ->capture_default_str();
  cmd->add_option("--crdt-strategy", flags->crdt.strategies,
                  "CRDT simulation: strategy to resolve with (repeat for several; default fedavg, median, "
                  "trimmed_mean:beta=0.2, ties:density=0.3, dare:p=0.3)");
  cmd->add_option("--devices", flags->devices,
                  "Device profile: uniform, heterogeneous or mobile (the device flags override its fields)");
  cmd->add_option("--max-tasks", flags->sim.max_tasks,
                  "Stop after this many training tasks (0 = run all --rounds versions)")
      ->capture_default_str();
  cmd->add_option("--server-mbps", flags->sim.server_mbps,
                  "Bandwidth of the server's link in Mbit/s each way, shared by every transfer (0 = unlimited)")
      ->capture_default_str();
  cmd->add_option("--task-overhead-ms", flags->sim.devices.task_overhead_ms,
                  "Fixed virtual milliseconds per task, on top of compute and transfers")
      ->capture_default_str();
  cmd->add_option("--examples-per-client", flags->sim.examples_per_client,
                  "Sample this many training examples per client with replacement (0: split the data when it "
                  "gives each client at least 10, else sample 50)")
      ->capture_default_str();
  cmd->add_flag("--dry-run", flags->dry_run,
                "Check the settings (flags and --scenario), print every one with where it came from, and exit");
  cmd->add_option("--plot", flags->plot, "Draw accuracy against round and virtual time into this PNG (gnuplot)");
  cmd->add_option("--data-dir", flags->data_dir, "Directory with the Fashion-MNIST IDX files")->capture_default_str();
  AddDataFlags(cmd, &flags->data, "The federation's data, partitioned among the clients");
  AddLossFlag(cmd, &flags->loss);
  cmd->add_option("--test-split", flags->test_split,
                  "With --data: the share of it held out (seeded) as the test set the server evaluates on")
      ->check(CLI::Range(0.01, 0.9))
      ->capture_default_str();
  cmd->add_option("--metrics-out", flags->metrics_out, "Write per-round metrics to this CSV file");
  cmd->add_option("--summary-out", flags->summary_out, "Write the run summary to this JSON file");
  cmd->add_option("--model-out", flags->model_out, "Write the final model to this .safetensors file");
  cmd->add_option("--train-subset", flags->train_subset, "Use only the first N training examples (0 = all)");
  cmd->add_option("--test-subset", flags->test_subset, "Evaluate on the first N test examples (0 = all)");
  cmd->add_option("--edges", flags->sim.edges,
                  "Edge aggregators between the clients and the server (sync or async mode, a --strategy with exact "
                  "sums: fedavg_exact, or exact=true as in fedadam:exact=true; or --dp central or tree): each "
                  "fetches a version once, serves its clients and forwards one partial sum per version (0 = none)")
      ->capture_default_str();
  cmd->add_option("--edge-mbps", flags->sim.edge_mbps, "With --edges: each edge's link, each way (0 = unlimited)")
      ->capture_default_str();
  cmd->add_option("--edge-latency-ms", flags->sim.edge_latency_ms,
                  "With --edges: latency per transfer over an edge's link")
      ->capture_default_str();
  cmd->add_option("--trainer-pipe", flags->trainer_pipe,
                  "IN,OUT: the virtual clients train with the caller's loop: jobs go out on descriptor OUT, "
                  "outcomes come back on IN (what Python's plexus.sim(train=...) uses; docs/python.md)");
  cmd->add_option("--threads", flags->threads,
                  "LibTorch and OpenBLAS threads per process (equal counts give equal bits)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  AddConfigOption(cmd);
  AddScenarioOption(cmd);
  cmd->callback([flags, cmd] {
    flags->cmd = cmd;
    DefaultDataForModel(flags->sim.model, flags->loss, &flags->data);
    RunSim(*flags);
  });
}

}  // namespace plexus::cli
