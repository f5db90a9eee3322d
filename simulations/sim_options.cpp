// What SimOptions allow before a simulation starts: their own consistency, and whether the
// rounds of a sync run can close at all.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "aggregators/registry.h"
#include "compression/codec.h"
#include "compression/coded_downloads.h"
#include "server/coordinator/engine_factory.h"
#include "simulations/attack.h"
#include "simulations/client_data.h"
#include "simulations/sim_runner.h"

namespace plexus {

Status SimOptions::Validate() const {
  if (clients <= 0) return InvalidArgumentError("--clients must be positive");
  if (mode == Mode::kSync && sync.clients_per_round > clients) {
    return InvalidArgumentError("--clients-per-round (" + std::to_string(sync.clients_per_round) +
                                ") exceeds --clients (" + std::to_string(clients) + ")");
  }
  if (examples_per_client < 0) return InvalidArgumentError("--examples-per-client must not be negative");
  PLEXUS_RETURN_IF_ERROR(devices.Validate());
  if (!(server_mbps >= 0)) return InvalidArgumentError("--server-mbps must not be negative (0 = unlimited)");
  PLEXUS_RETURN_IF_ERROR(ParseAttack(attack).status());
  if (!codec.empty()) PLEXUS_RETURN_IF_ERROR(MakeCodec(codec).status());
  if (!download_codec.empty()) PLEXUS_RETURN_IF_ERROR(CodedDownloads::Create(download_codec).status());
  if (!(attackers >= 0.0 && attackers < 1.0)) return InvalidArgumentError("--attackers must lie in [0, 1)");
  if (!(secagg_dropout >= 0.0 && secagg_dropout < 1.0)) {
    return InvalidArgumentError("--secagg-dropout must lie in [0, 1)");
  }
  if (secagg_dropout > 0 && !sync.secagg) return InvalidArgumentError("--secagg-dropout needs --secagg");
  PLEXUS_RETURN_IF_ERROR(CheckSecAggMode(mode, sync));
  if (edges < 0 || edges > clients) return InvalidArgumentError("--edges must lie in [0, --clients]");
  if (edges > 0) {
    if (mode == Mode::kSemiAsync) {
      return InvalidArgumentError(
          "--edges: edge aggregators are simulated in sync and async modes; under a semi-asynchronous root each edge "
          "is one member of its groups, which the simulator's clients are instead");
    }
    // The server folds the edges' partial sums; with exact sums that is folding their updates, and
    // central DP (dp_fedavg, dp_ftrl) clips at the edges what it would clip at a flat server.
    Result<std::unique_ptr<Aggregator>> merge =
        MakeAggregator(mode == Mode::kSync ? sync.strategy : async.strategy, nullptr);
    if (merge.ok() && !(*merge)->takes_partial_sums()) {
      return InvalidArgumentError(
          "--edges needs a strategy that keeps exact sums (fedavg_exact, or exact=true as in fedadam:exact=true) or "
          "central DP with a fixed clip (--dp central or tree): edges forward partial sums, and only these compose "
          "into what a flat server would publish (robust rules would have to run at each edge, or edges forward raw "
          "updates: not simulated)");
    }
    if (sync.secagg) return InvalidArgumentError("--edges with --secagg is not simulated");
    if (!download_codec.empty()) return InvalidArgumentError("--edges with --download-codec is not simulated");
    if (!(edge_mbps >= 0) || !(edge_latency_ms >= 0)) {
      return InvalidArgumentError("--edge-mbps and --edge-latency-ms must not be negative");
    }
  }
  if (sync.secagg) {
    if (attack != "none") {
      return InvalidArgumentError("--secagg with --attack: the simulated attacks see or shape updates in the clear");
    }
    if (!codec.empty()) return InvalidArgumentError("--secagg with --codec: a masked update is its own encoding");
  }
  return Status::Ok();
}

Status CheckRoundsCanClose(const SimOptions& o, const ClientData& data, size_t num_params) {
  const auto n = static_cast<size_t>(o.clients);
  const std::vector<double> ms_per_step = o.devices.Assign(n, o.seed);
  std::vector<double> task_ms(n);
  for (size_t i = 0; i < n; ++i) {
    task_ms[i] = o.devices.TaskMs(o.sync.task.StepsFor(data.examples(i)), ms_per_step[i], num_params * sizeof(float),
                                  o.devices.BandwidthFactor(i, o.seed));
  }
  const auto needed = static_cast<size_t>(
      std::clamp<int64_t>(o.sync.min_clients > 0 ? o.sync.min_clients : o.sync.clients_per_round, 1, o.clients));
  std::nth_element(task_ms.begin(), task_ms.begin() + static_cast<std::ptrdiff_t>(needed - 1), task_ms.end());
  const double reachable_ms = task_ms[needed - 1];
  if (reachable_ms <= static_cast<double>(o.sync.round_deadline_ms)) return Status::Ok();
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "no round could close: even the %zu fastest clients need %.0f virtual s for a task (download, "
                "local steps, upload) and a round's deadline is %.0f s; raise --round-deadline-s, or lower "
                "--local-steps/--local-epochs or --ms-per-step",
                needed, reachable_ms / 1000.0, static_cast<double>(o.sync.round_deadline_ms) / 1000.0);
  return InvalidArgumentError(buf);
}

}  // namespace plexus
