#include "apps/plexus/gossip_sim_command.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <optional>

#include "apps/plexus/accuracy_plot.h"
#include "apps/plexus/commands.h"
#include "apps/plexus/help_lists.h"
#include "apps/plexus/run_estimate.h"
#include "apps/plexus/run_summary.h"
#include "apps/plexus/slow_link_checks.h"
#include "apps/plexus/test_set_evaluator.h"
#include "compute/fashion_mnist.h"
#include "compute/model_zoo.h"
#include "compute/text_corpus.h"
#include "core/atomic_file.h"
#include "core/safetensors.h"
#include "gossip/protocol/neighbour_merge.h"
#include "gossip/protocol/registry.h"
#include "gossip/protocol/topology.h"
#include "simulations/client_data.h"
#include "simulations/mpi_task_runner.h"

namespace plexus::cli {
namespace {

// "0.2:10" -> fraction 0.2 every 10 rounds.
void ParseChurn(const std::string& text, GossipSimOptions* o) {
  if (text.empty()) return;
  const size_t colon = text.find(':');
  try {
    if (colon == std::string::npos) throw std::invalid_argument("no colon");
    size_t used = 0;
    o->churn_fraction = std::stod(text.substr(0, colon), &used);
    if (used != colon) throw std::invalid_argument("fraction");
    const std::string every = text.substr(colon + 1);
    o->churn_every = std::stoll(every, &used);
    if (used != every.size()) throw std::invalid_argument("every");
  } catch (const std::exception&) {
    throw CommandError("--churn: expected FRACTION:EVERY, e.g. 0.2:10, not '" + text + "'");
  }
}

Status WriteMetrics(const std::string& path, const GossipResult& r) {
  std::string csv =
      "round,live_nodes,test_accuracy,test_loss,mean_node_accuracy,min_node_accuracy,consensus_distance,"
      "train_loss,bytes_sent_per_node,virtual_time_s,wall_time_s,partitioned,suspicions,deaths,refutations,"
      "membership_errors,membership_bytes_per_node\n";
  for (const GossipRound& g : r.rounds) {
    char line[512];
    std::snprintf(
        line, sizeof line, "%lld,%lld,%.6f,%.6f,%.6f,%.6f,%.6g,%.6f,%.0f,%.3f,%.3f,%d,%lld,%lld,%lld,%lld,%.0f\n",
        static_cast<long long>(g.round), static_cast<long long>(g.live_nodes), g.test_accuracy, g.test_loss,
        g.mean_node_accuracy, g.min_node_accuracy, g.consensus_distance, g.mean_train_loss, g.bytes_sent_per_node,
        g.virtual_time_s, g.wall_time_s, g.partitioned ? 1 : 0, static_cast<long long>(g.suspicions),
        static_cast<long long>(g.deaths), static_cast<long long>(g.refutations),
        static_cast<long long>(g.membership_errors), g.membership_bytes_per_node);
    csv += line;
  }
  return WriteFileAtomically(path, {csv});
}

// `unigram`: the language model's baseline (the test text's byte entropy in bits), which also
// adds bits per character to the rounds; nullopt for other models.
Status WriteSummary(const std::string& path, const GossipRun& run, const GossipResult& r,
                    std::optional<double> unigram) {
  const GossipSimOptions& o = run.options;
  nlohmann::json j;
  j["mode"] = "gossip";
  j["gossip"] = r.gossip;
  j["merge"] = r.merge;
  j["topology"] = r.topology;
  j["model"] = o.model;
  j["partition"] = o.partition.ToString();
  j["nodes"] = o.nodes;
  j["seed"] = o.seed;
  j["train"] = o.train;
  j["attack"] = o.attack;
  j["attackers"] = r.attackers;
  j["final_test_accuracy"] = r.final_test_accuracy;
  if (unigram && !r.rounds.empty()) {
    j["final_test_loss"] = r.rounds.back().test_loss;
    j["final_test_bits_per_char"] = BitsPerChar(r.rounds.back().test_loss);
    j["unigram_bits_per_char"] = *unigram;
  }
  j["mean_node_accuracy"] = r.mean_node_accuracy;
  j["min_node_accuracy"] = r.min_node_accuracy;
  j["consensus_distance"] = r.consensus_distance;
  j["bytes_sent_per_node"] = r.bytes_sent_per_node;
  j["rounds_completed"] = r.rounds_completed;
  j["final_model_sha256"] = r.final_model_sha256;
  j["messages_lost"] = r.messages_lost;
  j["trainings"] = r.trainings;
  j["liveness"] = r.swim ? "swim" : "oracle";
  j["suspicions"] = r.suspicions;
  j["deaths"] = r.deaths;
  j["refutations"] = r.refutations;
  j["rounds_to_recover"] = r.rounds_to_recover < 0 ? nlohmann::json() : nlohmann::json(r.rounds_to_recover);
  j["peak_rss_bytes"] = PeakRssBytes();
  j["cpu_time_s"] = CpuTimeSeconds();
  j["wall_time_s"] = r.wall_time_s;
  j["virtual_time_s"] = r.virtual_time_s;
  nlohmann::json rounds = nlohmann::json::array();
  for (const GossipRound& g : r.rounds) {
    rounds.push_back({{"round", g.round},
                      {"live_nodes", g.live_nodes},
                      {"test_accuracy", g.test_accuracy},
                      {"test_loss", g.test_loss},
                      {"mean_node_accuracy", g.mean_node_accuracy},
                      {"min_node_accuracy", g.min_node_accuracy},
                      {"consensus_distance", g.consensus_distance},
                      {"bytes_sent_per_node", g.bytes_sent_per_node},
                      {"virtual_time_s", g.virtual_time_s},
                      {"wall_time_s", g.wall_time_s},
                      {"suspicions", g.suspicions},
                      {"deaths", g.deaths},
                      {"refutations", g.refutations},
                      {"membership_errors", g.membership_errors}});
    if (unigram) rounds.back()["test_bits_per_char"] = BitsPerChar(g.test_loss);
  }
  j["rounds"] = rounds;
  return WriteFileAtomically(path, {j.dump(2), "\n"});
}

}  // namespace

void AddGossipFlags(CLI::App* cmd, GossipFlags* g) {
  cmd->add_option("--gossip", g->gossip,
                  "gossip mode: the algorithm, " + OneOf(gossip::GossipNames()) +
                      " each with its settings, e.g. el:s=2 (docs/gossip.md)")
      ->capture_default_str();
  cmd->add_option("--merge", g->merge,
                  "gossip mode: how a node merges its neighbours' models, " + OneOf(gossip::MergeRuleNames()) +
                      " with settings such as clipped:tau=T, balance:gamma=G,kappa=K, trimmed_mean:beta=0.2")
      ->capture_default_str();
  cmd->add_option("--topology", g->topology,
                  "gossip mode: the graph, " + OneOf(gossip::Topology::Names()) +
                      " regular takes d=D (default: el complete, dpsgd regular:d=4, pushsum onepeer-exponential)");
  cmd->add_option("--train", g->train, "gossip mode: all (nodes train) or none (models are only moved and merged)")
      ->check(CLI::IsMember({"all", "none"}))
      ->capture_default_str();
  cmd->add_option("--churn", g->churn,
                  "gossip mode: FRACTION:EVERY, e.g. 0.2:10: every EVERY rounds that fraction of the nodes leaves "
                  "and those that left before rejoin");
  cmd->add_option("--partition-at", g->partition_at, "gossip mode: split the network in two halves after this round");
  cmd->add_option("--heal-at", g->heal_at, "gossip mode: heal the partition after this round");
  cmd->add_option("--liveness", g->liveness,
                  "gossip mode: how nodes learn who is alive: swim (each node runs the SWIM membership of plexus peer "
                  "over the simulated network; churned nodes crash silently), oracle (the simulator tells them at "
                  "once; churned nodes leave gracefully), or auto (swim up to " +
                      std::to_string(GossipSimOptions::kMaxAutoSwimNodes) + " nodes)")
      ->check(CLI::IsMember({"auto", "swim", "oracle"}))
      ->capture_default_str();
  cmd->add_option("--eval-nodes", g->eval_nodes, "gossip mode: honest nodes whose own model is evaluated each round")
      ->capture_default_str();
  cmd->add_option("--node-test-subset", g->node_test_subset,
                  "gossip mode: test examples each node's own model is evaluated on")
      ->capture_default_str();
}

void RunGossipSim(GossipRun run, const GossipFlags& g, const MpiSession* mpi) {
  const bool training_rank = mpi && mpi->rank() > 0;
  if (mpi && mpi->size() > 1 && run.options.task.optimizer == "adamw") {
    throw CommandError(
        "--optimizer adamw keeps each node's moments in the simulator's process: run it without MPI ranks");
  }
  GossipSimOptions& o = run.options;
  o.gossip = g.gossip;
  o.merge = g.merge;
  o.topology = g.topology;
  o.train = g.train == "all";
  ParseChurn(g.churn, &o);
  o.partition_at = g.partition_at;
  o.heal_at = g.heal_at;
  o.eval_nodes = g.eval_nodes;
  o.liveness = g.liveness;
  Check(o.Validate(), "invalid settings");
  const ModelChoice model(o.model, run.loss);  // a model file is read (and checked) before anything starts
  if (model.is_script()) o.initial = std::make_shared<const ModelState>(model.Initial(o.seed));
  if (auto factory = gossip::MakeGossip(o.gossip, o.merge); factory.ok()) {
    if (o.train) CheckGossipLocalSteps(**factory, o.gossip, o.task);
    Check((*factory)->CheckModel(o.initial ? *o.initial : model.Initial(o.seed)), "--gossip");  // e.g. fragments
  }
  if (!run.plot.empty()) CheckPlotterPresent();
  if (!training_rank) {
    std::printf(
        "plexus sim: gossip mode, %s, merge %s, topology %s, %lld nodes, %lld rounds, model %s, %s, seed %llu, "
        "liveness %s%s\n",
        o.gossip.c_str(), o.merge.c_str(), o.topology.empty() ? "(the algorithm's own)" : o.topology.c_str(),
        static_cast<long long>(o.nodes), static_cast<long long>(o.rounds), o.model.c_str(),
        o.train ? ("partition " + o.partition.ToString()).c_str() : "no training",
        static_cast<unsigned long long>(o.seed), o.swim() ? "swim" : "oracle",
        o.attack == "none"
            ? ""
            : (", " + std::to_string(static_cast<int>(o.attackers * 100 + 0.5)) + "% attackers (" + o.attack + ")")
                  .c_str());
    if (mpi) std::printf("plexus sim: local training spread over %d MPI ranks\n", mpi->size());
    std::fflush(stdout);
  }
  if (run.dry_run) {
    if (run.cmd) PrintResolvedSettings(*run.cmd);
    return;
  }

  Dataset train, test;
  std::unique_ptr<Trainer> trainer;
  if (o.train) {
    TrainAndTest sets = LoadTrainAndTest(run.data, model.regression(), run.data_dir, run.test_split, o.seed);
    train = std::move(sets.train);
    test = std::move(sets.test);
    if (run.train_subset) train.KeepFirst(run.train_subset);
    trainer = Take(model.MakeTrainer(run.threads, /*portable=*/false), "--model");
    if (!training_rank) {  // long runs say so before they start
      const int64_t steps =
          o.task.StepsFor(ClientData::ExamplesPerClient(train.size(), o.nodes, o.examples_per_client));
      PrintTrainingEstimate(MeasureMsPerStep(trainer.get(), model.Initial(0), train, o.task.batch_size),
                            o.rounds * o.nodes, steps, mpi ? mpi->size() : 1);
    }
  }
#if PLEXUS_WITH_MPI
  if (training_rank) {
    if (!o.train) return;  // nothing to train: rank 0 runs the protocol alone
    return Check(ServeMpiTrainingJobs(trainer.get(), train), "MPI training rank");
  }
  std::unique_ptr<MpiTaskRunner> spread;
  if (mpi && o.train) spread = std::make_unique<MpiTaskRunner>(mpi, trainer.get(), &train);
#endif
  std::unique_ptr<LocalTaskRunner> local;
  TaskRunner* runner = nullptr;
  if (o.train) {
    local = std::make_unique<LocalTaskRunner>(trainer.get(), &train);
    runner = local.get();
  }
#if PLEXUS_WITH_MPI
  if (spread) runner = spread.get();
#endif
  std::unique_ptr<TestSetEvaluator> average_eval, node_eval;
  if (o.train) {
    average_eval = std::make_unique<TestSetEvaluator>(trainer.get(), DatasetView::Prefix(test, run.test_subset));
    node_eval = std::make_unique<TestSetEvaluator>(trainer.get(), DatasetView::Prefix(test, g.node_test_subset));
  }
  GossipResult result = Take(RunGossipSimulation(
      o, o.train ? &train : nullptr, runner, average_eval.get(), node_eval.get(), [&](const GossipRound& r) {
        const double eta = r.wall_time_s / static_cast<double>(r.round) * static_cast<double>(o.rounds - r.round);
        char bits[48] = "";  // the language model's measure
        if (model.language()) std::snprintf(bits, sizeof bits, "  test_bits_per_char %.3f", BitsPerChar(r.test_loss));
        std::printf(
            "round %3lld/%lld  live %lld  test_accuracy %.4f%s  node_accuracy mean %.4f min "
            "%.4f  consensus %.4g  train_loss %.4f  sent %.2f MB/node  virtual %.1f s  "
            "real %.1f s  eta %.0f s%s%s\n",
            static_cast<long long>(r.round), static_cast<long long>(o.rounds), static_cast<long long>(r.live_nodes),
            r.test_accuracy, bits, r.mean_node_accuracy, r.min_node_accuracy, r.consensus_distance, r.mean_train_loss,
            r.bytes_sent_per_node / 1e6, r.virtual_time_s, r.wall_time_s, eta, r.partitioned ? "  (partitioned)" : "",
            o.swim()
                ? ("  swim: " + std::to_string(r.suspicions) + " suspected, " + std::to_string(r.deaths) + " buried, " +
                   std::to_string(r.refutations) + " refuted, " + std::to_string(r.membership_errors) + " wrong views")
                      .c_str()
                : "");
        std::fflush(stdout);
      }));
  std::printf(
      "final test accuracy %.4f (average model), nodes' own mean %.4f min %.4f, consensus distance %.4g after %lld "
      "rounds; %.2f MB sent per node, %lld messages lost, %.1f s virtual, %.1f s real, peak memory %.0f MiB; "
      "model sha256 %s\n",
      result.final_test_accuracy, result.mean_node_accuracy, result.min_node_accuracy, result.consensus_distance,
      static_cast<long long>(result.rounds_completed), result.bytes_sent_per_node / 1e6,
      static_cast<long long>(result.messages_lost), result.virtual_time_s, result.wall_time_s,
      static_cast<double>(PeakRssBytes()) / (1 << 20), result.final_model_sha256.c_str());
  if (result.swim) {
    std::printf("swim: %lld suspicions, %lld suspects buried, %lld refutations over the run\n",
                static_cast<long long>(result.suspicions), static_cast<long long>(result.deaths),
                static_cast<long long>(result.refutations));
  }
  if (result.rounds_to_recover >= 0) {
    std::printf(
        "after the partition healed, consensus distance was back under its pre-partition level in %lld rounds\n",
        static_cast<long long>(result.rounds_to_recover));
  }
  if (!run.metrics_out.empty()) Check(WriteMetrics(run.metrics_out, result));
  if (!run.summary_out.empty()) {
    std::optional<double> unigram;
    if (model.language() && test.size() > 0) unigram = UnigramBitsPerChar(test);
    Check(WriteSummary(run.summary_out, run, result, unigram));
  }
  if (!run.model_out.empty()) Check(WriteSafetensorsFile(run.model_out, result.final_model));
  if (!run.plot.empty()) {
    const std::string csv = run.metrics_out.empty() ? run.plot + ".csv" : run.metrics_out;
    if (run.metrics_out.empty()) Check(WriteMetrics(csv, result));
    PlotAccuracy({csv}, run.plot);
    std::printf("plot written to %s\n", run.plot.c_str());
  }
}

}  // namespace plexus::cli
