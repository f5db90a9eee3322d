// `plexus sim --mode gossip`: the decentralized simulation's own flags, its progress lines and
// its result files (summary JSON, metrics CSV, plot). cmd_sim.cpp registers the flags and hands
// over when --mode is gossip. Throws CommandError (CLI edge only).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "apps/plexus/model_choice.h"
#include "simulations/gossip_sim.h"

namespace plexus {
class MpiSession;
}

namespace plexus::cli {

struct GossipFlags {
  std::string gossip = "el:s=2";
  std::string merge = "mean";
  std::string topology;  // empty: the algorithm's own
  std::string train = "all";
  std::string churn;  // FRACTION:EVERY
  int64_t partition_at = -1, heal_at = -1;
  int64_t eval_nodes = 16;
  size_t node_test_subset = 1000;
  std::string liveness = "auto";
};

void AddGossipFlags(CLI::App* cmd, GossipFlags* flags);

// What the rest of `plexus sim` collected: the shared options (nodes, rounds, model, seed,
// local training, devices, attack) and the output files.
struct GossipRun {
  GossipSimOptions options;
  std::string data_dir, metrics_out, summary_out, model_out, plot;
  std::string loss = "cross_entropy";
  DataFlags data;           // a user's data file (with a TorchScript model)
  double test_split = 0.1;  // with --data: the share held out as the test set
  size_t train_subset = 0, test_subset = 0;
  int threads = 1;
  bool dry_run = false;
  const CLI::App* cmd = nullptr;  // for --dry-run's resolved settings
};

// Completes run.options from `flags` (InvalidArgument naming the flag as CommandError), prints
// the settings, and runs; with `mpi`, ranks above 0 only train.
void RunGossipSim(GossipRun run, const GossipFlags& flags, const MpiSession* mpi);

}  // namespace plexus::cli
