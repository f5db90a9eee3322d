#include <spdlog/spdlog.h>

#include <cstdio>

#include "apps/plexus/commands.h"
#include "apps/plexus/run_summary.h"
#include "apps/plexus/shared_flags.h"
#include "apps/plexus/test_set_evaluator.h"
#include "compute/fashion_mnist.h"
#include "core/safetensors.h"
#include "simulations/sim_runner.h"

namespace plexus::cli {
namespace {

struct SimFlags {
  SimOptions sim;
  std::string partition = "iid";
  std::string data_dir = kDefaultFashionMnistDir;
  std::string metrics_out;
  std::string summary_out;
  std::string model_out;
  size_t train_subset = 0;
  size_t test_subset = 0;
  int threads = 1;
};

void RunSim(const SimFlags& f) {
  SimOptions options = f.sim;
  options.partition = Take(PartitionSpec::Parse(f.partition), "--partition");
  options.sync.min_clients = options.sync.clients_per_round;
  Check(options.sync.Validate(), "invalid settings");

  Dataset train = Take(LoadFashionMnist(f.data_dir, Split::kTrain));
  Dataset test = Take(LoadFashionMnist(f.data_dir, Split::kTest));
  if (f.train_subset) {
    train.labels.resize(std::min(train.size(), f.train_subset));
    train.pixels.resize(train.size() * static_cast<size_t>(train.pixels_per_image()));
  }
  std::unique_ptr<Trainer> trainer = Take(MakeTorchTrainer(options.model, f.threads));
  TestSetEvaluator evaluator(trainer.get(), DatasetView::Prefix(test, f.test_subset));

  std::printf("plexus sim: %lld clients, %lld per round, %lld rounds, model %s, partition %s, seed %llu\n",
              static_cast<long long>(options.clients), static_cast<long long>(options.sync.clients_per_round),
              static_cast<long long>(options.sync.rounds), options.model.c_str(), options.partition.ToString().c_str(),
              static_cast<unsigned long long>(options.seed));
  std::fflush(stdout);
  SimResult result = Take(RunSimulation(options, train, trainer.get(), &evaluator, [&](const SimRound& r) {
    std::printf("round %3llu/%lld  updates %lld  train_loss %.4f  test_accuracy %.4f  test_loss %.4f  %.1f s\n",
                static_cast<unsigned long long>(r.record.round), static_cast<long long>(options.sync.rounds),
                static_cast<long long>(r.record.num_updates), r.record.mean_train_loss,
                r.record.test_accuracy.value_or(0.0), r.record.test_loss.value_or(0.0), r.wall_time_s);
    std::fflush(stdout);
  }));
  std::printf("final test accuracy %.4f after %zu rounds in %.1f s (model sha256 %s)\n", result.final_test_accuracy,
              result.rounds.size(), result.wall_time_s, result.final_model_sha256.c_str());

  RunSummary s;
  s.model = options.model;
  s.strategy = result.strategy;
  s.partition = options.partition.ToString();
  s.clients = options.clients;
  s.clients_per_round = options.sync.clients_per_round;
  s.seed = options.seed;
  for (const SimRound& r : result.rounds) {
    s.updates_accepted += r.record.num_updates;
    s.rounds.push_back(r.record);
    s.round_wall_time_s.push_back(r.wall_time_s);
  }
  s.model_version = result.model_version;
  s.final_model_sha256 = result.final_model_sha256;
  s.wall_time_s = result.wall_time_s;
  if (!f.metrics_out.empty()) Check(WriteMetricsCsv(f.metrics_out, s));
  if (!f.summary_out.empty()) Check(WriteSummaryJson(f.summary_out, s));
  if (!f.model_out.empty()) Check(WriteSafetensorsFile(f.model_out, result.final_model));
}

}  // namespace

void AddSimCommand(CLI::App& app) {
  auto flags = std::make_shared<SimFlags>();
  flags->sim.sync.rounds = 20;
  flags->sim.sync.clients_per_round = 5;
  CLI::App* cmd = app.add_subcommand("sim", "Run a simulated federation in one process (virtual clients, no sockets)");
  cmd->add_option("--clients", flags->sim.clients, "Virtual clients (N)")->capture_default_str();
  cmd->add_option("--model", flags->sim.model, "Model: mlp or cnn")->check(CLI::IsMember({"mlp", "cnn"}))->capture_default_str();
  cmd->add_option("--partition", flags->partition, "iid, dirichlet:ALPHA or shards:S")->capture_default_str();
  cmd->add_option("--seed", flags->sim.seed, "Seed for init, partition, sampling and batches")->capture_default_str();
  AddFederationFlags(cmd, &flags->sim.sync);
  cmd->add_option("--data-dir", flags->data_dir, "Directory with the Fashion-MNIST IDX files")->capture_default_str();
  cmd->add_option("--metrics-out", flags->metrics_out, "Write per-round metrics to this CSV file");
  cmd->add_option("--summary-out", flags->summary_out, "Write the run summary to this JSON file");
  cmd->add_option("--model-out", flags->model_out, "Write the final model to this .safetensors file");
  cmd->add_option("--train-subset", flags->train_subset, "Use only the first N training examples (0 = all)");
  cmd->add_option("--test-subset", flags->test_subset, "Evaluate on the first N test examples (0 = all)");
  cmd->add_option("--threads", flags->threads, "LibTorch threads")->check(CLI::Range(1, 256))->capture_default_str();
  AddConfigOption(cmd);
  cmd->callback([flags] { RunSim(*flags); });
}

}  // namespace plexus::cli
