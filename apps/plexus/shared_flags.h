// Flags shared by `plexus server` and `plexus sim`: the mode, the synchronous-round settings and
// the client training hyperparameters (bound straight into SyncOptions), and the asynchronous and
// semi-asynchronous settings (AsyncOptions).
#pragma once

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "aggregators/registry.h"
#include "apps/plexus/help_lists.h"
#include "server/coordinator/async_engine.h"
#include "server/coordinator/mode.h"
#include "server/coordinator/sync_engine.h"

namespace plexus::cli {

inline void AddFederationFlags(CLI::App* cmd, SyncOptions* o) {
  cmd->add_option("--rounds", o->rounds, "Model versions to publish before the federation finishes")
      ->capture_default_str();
  cmd->add_option("--clients-per-round", o->clients_per_round, "Clients sampled per round (K)")->capture_default_str();
  cmd->add_option("--strategy", o->strategy,
                  "Aggregation strategy, " + OneOf(StrategyNames()) +
                      " each with its settings, e.g. fedavg:weighted=false (docs/aggregators.md)")
      ->capture_default_str();
  cmd->add_option("--backup-workers", o->backup_workers,
                  "sync: none, static:b=B (close each round without the B slowest) or dynamic (DBW)")
      ->capture_default_str();
  cmd->add_option("--local-epochs", o->task.local_epochs, "Local epochs per task")->capture_default_str();
  cmd->add_option("--local-steps", o->task.local_steps, "Local SGD steps per task (overrides epochs when > 0)")
      ->capture_default_str();
  cmd->add_option("--batch-size", o->task.batch_size, "Local batch size")->capture_default_str();
  cmd->add_option("--lr", o->task.learning_rate, "Client learning rate")->capture_default_str();
  cmd->add_option("--momentum", o->task.momentum, "Client SGD momentum")->capture_default_str();
  cmd->add_option("--optimizer", o->task.optimizer,
                  "Clients' inner optimizer: sgd (with --momentum) or adamw (betas 0.9/0.999, its moments kept by "
                  "each client from task to task)")
      ->check(CLI::IsMember({"sgd", "adamw"}))
      ->capture_default_str();
  cmd->add_option("--weight-decay", o->task.weight_decay, "AdamW's decoupled weight decay")->capture_default_str();
  cmd->add_option_function<std::vector<std::string>>(
         "--task-config",
         [o](const std::vector<std::string>& settings) {
           for (const std::string& kv : settings) {
             const size_t eq = kv.find('=');
             if (eq == std::string::npos || eq == 0) {
               throw CLI::ValidationError("--task-config", "takes KEY=VALUE (got '" + kv + "')");
             }
             if (!o->task.config.emplace(kv.substr(0, eq), kv.substr(eq + 1)).second) {
               throw CLI::ValidationError("--task-config", "'" + kv.substr(0, eq) + "' given twice");
             }
           }
         },
         "KEY=VALUE for user-written training loops (Python's task.config), passed with every task; repeat "
         "the flag for more")
      ->take_all()
      ->allow_extra_args(false);
}

// --secagg [PARAMS]: secure aggregation in sync rounds and FedBuff buffers (given:
// cmd->count("--secagg"); the parameters, if any, in *spec for SecAggSettings::Parse).
inline void AddSecAggFlag(CLI::App* cmd, std::string* spec) {
  cmd->add_option("--secagg", *spec,
                  "Secure aggregation (sync and async modes): each round's clients, or each FedBuff buffer's, mask "
                  "their updates so that the server learns only the group's weighted mean. Optional parameters "
                  "threshold=T,degree=K,clip=R,weight-cap=N,stage-s=S,spare=M,input-s=I (defaults: K the even "
                  "number nearest above 2·log2(group size), T = K/2+1, clip 1 per value, weights saturating at 65536 "
                  "examples, stages other than the training one closing after 30 s at most); the stage in which "
                  "members train lasts at most --round-deadline-s (sync) or input-s (async; default 600). Async: a "
                  "group is --buffer-size clients plus M spares for dropouts (default a fifth, at least 1). "
                  "docs/privacy.md")
      ->expected(0, 1);
}

// With `gossip` (plexus sim), --mode also takes "gossip": decentralized nodes, no server.
inline void AddModeFlags(CLI::App* cmd, Mode* mode, AsyncOptions* o, bool* gossip = nullptr) {
  std::vector<std::string> names{"sync", "async", "semiasync"};
  if (gossip) names.push_back("gossip");
  cmd->add_option_function<std::string>(
         "--mode",
         [mode, gossip](const std::string& name) {
           if (gossip) *gossip = name == "gossip";
           if (name != "gossip") *mode = ParseMode(name).value();
         },
         gossip ? "Mode: sync (rounds), async (FedBuff/FedAsync), semiasync (FedCompass groups) or gossip "
                  "(decentralized nodes, no server)"
                : "Federation mode: sync (rounds), async (FedBuff/FedAsync) or semiasync (FedCompass groups)")
      ->check(CLI::IsMember(names))
      ->default_str(std::string(ModeName(*mode)));
  cmd->add_option("--buffer-size", o->buffer_size, "async: updates per published version (FedBuff's K; 1 = FedAsync)")
      ->capture_default_str();
  cmd->add_option("--server-lr", o->server_lr,
                  "async, semiasync: server learning rate (FedAsync's alpha when buffer-size is 1)")
      ->capture_default_str();
  cmd->add_option("--staleness", o->staleness,
                  "async, semiasync: staleness weight, constant | poly:a=A | hinge:a=A,b=B")
      ->capture_default_str();
  cmd->add_option("--max-staleness", o->max_staleness,
                  "async, semiasync: refuse updates more versions behind than this")
      ->capture_default_str();
  cmd->add_option("--max-concurrency", o->max_concurrency,
                  "async, semiasync: most tasks in flight at once (0 = no bound)")
      ->capture_default_str();
  cmd->add_option("--q-min", o->compass.q_min, "semiasync: fewest local steps per task")->capture_default_str();
  cmd->add_option("--q-max", o->compass.q_max, "semiasync: most local steps per task")->capture_default_str();
  cmd->add_option("--speed-momentum", o->compass.speed_momentum,
                  "semiasync: weight of the newest observation in each client's speed estimate")
      ->capture_default_str();
  cmd->add_option("--latest-time-factor", o->compass.latest_time_factor,
                  "semiasync: a group waits until this many times its expected duration (lambda)")
      ->capture_default_str();
}

// The AsyncOptions of a run in `mode`: the async flags, plus the options every engine shares
// (rounds, task hyperparameters, timeouts) and, when --strategy was given, the strategy from the
// shared flags (async's own default strategy is the uniform mean of FedBuff).
inline AsyncOptions AsyncOptionsFor(Mode mode, const AsyncOptions& flags, const SyncOptions& sync,
                                    const CLI::App* cmd) {
  AsyncOptions o = flags;
  static_cast<SharedEngineOptions&>(o) = sync;
  if (cmd->count("--strategy") > 0) o.strategy = sync.strategy;
  o.semi_async = mode == Mode::kSemiAsync;
  return o;
}

// --min-clients left out: 2, or the fewest updates the strategy takes per round (Krum 2f + 3,
// Bulyan 4f + 3), at most --clients-per-round; the same rule for server and sim. Before, a robust
// strategy was refused unless --min-clients was raised by hand (server) or M was K (sim).
// Returns, for --dry-run, the setting's value and source when it was raised (else empty).
inline std::map<std::string, std::string> DefaultMinClients(const CLI::App& cmd, SyncOptions* sync) {
  if (cmd.count("--min-clients") > 0) return {};
  auto strategy = MakeAggregator(sync->strategy, nullptr);
  if (!strategy.ok()) return {};  // refused later, naming its flag
  // A secure aggregation group has three members at least.
  const bool secure = cmd.count("--secagg") > 0 && (*strategy)->min_updates() < 3;
  const std::string who = secure ? "a secure aggregation group" : (*strategy)->Describe();
  const auto needs = secure ? int64_t{3} : static_cast<int64_t>((*strategy)->min_updates());
  const int64_t m = std::min(sync->clients_per_round, std::max(sync->min_clients, needs));
  std::map<std::string, std::string> raised;
  if (m != sync->min_clients) {
    std::fprintf(stderr, "plexus: --min-clients left out: %lld, the updates %s takes per round\n",
                 static_cast<long long>(m), who.c_str());
    raised["min-clients"] = std::to_string(m) + "  (default, raised to what " + who + " takes)";
  }
  sync->min_clients = m;
  return raised;
}

}  // namespace plexus::cli
