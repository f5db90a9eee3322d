// Flags shared by `plexus server` and `plexus sim`: the synchronous-round settings and the
// client training hyperparameters, bound straight into SyncOptions.
#pragma once

#include <CLI/CLI.hpp>

#include "server/coordinator/sync_engine.h"

namespace plexus::cli {

inline void AddFederationFlags(CLI::App* cmd, SyncOptions* o) {
  cmd->add_option("--rounds", o->rounds, "Model versions to publish before the federation finishes")
      ->capture_default_str();
  cmd->add_option("--clients-per-round", o->clients_per_round, "Clients sampled per round (K)")->capture_default_str();
  cmd->add_option("--strategy", o->strategy, "Aggregation strategy, e.g. fedavg or fedavg:weighted=false")
      ->capture_default_str();
  cmd->add_option("--local-epochs", o->task.local_epochs, "Local epochs per task")->capture_default_str();
  cmd->add_option("--local-steps", o->task.local_steps, "Local SGD steps per task (overrides epochs when > 0)")
      ->capture_default_str();
  cmd->add_option("--batch-size", o->task.batch_size, "Local batch size")->capture_default_str();
  cmd->add_option("--lr", o->task.learning_rate, "Client learning rate")->capture_default_str();
  cmd->add_option("--momentum", o->task.momentum, "Client SGD momentum")->capture_default_str();
}

}  // namespace plexus::cli
