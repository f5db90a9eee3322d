// Settings of the slow-link algorithms (docs/slow-links.md) that cannot hold, refused at start by
// `plexus server`, `plexus peer` and `plexus sim` with one line naming the flag. Throws CommandError (CLI edge
// only).
#pragma once

#include <string>

#include "aggregators/registry.h"
#include "aggregators/strategy_spec.h"
#include "apps/plexus/commands.h"
#include "compression/codec.h"
#include "core/task.h"
#include "gossip/protocol/registry.h"

namespace plexus::cli {

// DiLoCo's inner phase is H optimizer steps (--local-steps H >= 1), not epochs. DeMo's fast
// components (--codec dct with clients' momentum in its decaying residual) are meant to be
// averaged: a strategy that does not publish the plain mean of the updates (a robust rule, a norm
// bound, DP) would vote or clip among them.
inline void CheckSlowLinkSettings(const std::string& strategy, const TaskHyperparams& task,
                                  const std::string& upload_codec) {
  Result<StrategySpec> spec = StrategySpec::Parse(strategy);
  if (!spec.ok()) return;  // the engine names a bad --strategy itself
  if (spec->name() == "diloco" && task.local_steps < 1) {
    throw CommandError("--local-steps: --strategy diloco needs H >= 1 inner steps per round (0 trains epochs)");
  }
  if (CodecNameOf(upload_codec) == "dct") {
    Result<std::unique_ptr<Aggregator>> made = MakeAggregator(strategy, nullptr);
    if (made.ok() && !(*made)->takes_the_mean()) {
      throw CommandError("--codec dct (DeMo's fast components) needs a strategy that averages them, not --strategy " +
                         strategy);
    }
  }
}

// The same for an algorithm between peers whose round is H steps (--gossip diloco).
inline void CheckGossipLocalSteps(const gossip::ProtocolFactory& factory, const std::string& gossip,
                                  const TaskHyperparams& task) {
  if (factory.needs_local_steps() && task.local_steps < 1) {
    throw CommandError("--local-steps: --gossip " + gossip + " needs H >= 1 inner steps per round (0 trains epochs)");
  }
}

}  // namespace plexus::cli
