// Central differential privacy for `plexus server` and `plexus sim`: the --dp flags, the
// dp_fedavg strategy they stand for in each mode, the accountant's view of the releases (ε after
// each published version) and the budget that ends a federation before it is exceeded.
// Plain functions and a value type; thread-compatible.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "apps/plexus/local_dp_flag.h"
#include "apps/plexus/run_summary.h"
#include "server/coordinator/secure_round.h"

namespace plexus::cli {

struct DpFlags {
  // "" (off), central:clip=C,noise=Z, adaptive:clip=C0,noise=Z,target=..,lr=..,count_noise=.. or
  // tree:clip=C,noise=Z,restart=K,participations=M
  std::string dp;
  int64_t population = 0;  // --dp-population: every client that could be picked (0: the command's default)
  double delta = 1e-5;     // --dp-delta
  double budget = 0;       // --dp-budget: ε not to exceed (0: none)
};

void AddDpFlags(CLI::App* cmd, DpFlags* flags);

// What a federation with DP releases, and what each release costs.
struct DpPlan {
  std::string strategy;            // the dp_fedavg or dp_ftrl strategy the engine runs
  double clip = 0;                 // C (the starting clip with adaptive clipping)
  double noise = 0;                // z
  double q = 0;                    // per-release sampling rate the accountant assumes
  double expected = 0;             // updates per release: the fixed denominator
  bool per_release_given = false;  // central:per_release=N (a root over edges), not the clients per round
  double delta = 1e-5;
  bool adaptive = false;
  bool tree = false;                    // DP-FTRL: tree aggregation, no sampling assumed (q is 0 then)
  bool distributed = false;             // the members of secure groups add the noise (--dp distributed)
  int64_t restart = 0;                  // tree: releases per tree (0: one tree)
  int64_t participations = 1;           // tree: contributions of a client to a tree at most
  std::string noise_source;             // "openssl" or "seeded(seed=N)"
  int64_t max_releases = 0;             // most releases within --dp-budget (0: no budget)
  std::vector<double> rdp_per_release;  // at DefaultRdpOrders() (the sampled mechanism's)

  // ε at delta after `releases` published versions (improved conversion); 0 with noise 0 is not
  // private at all: +infinity then.
  double EpsilonAfter(int64_t releases) const;
};

// The plan for `flags`, or nullopt when --dp is not given. `per_release` is the number
// of updates a version is made of (clients per round; the buffer size in async mode),
// `versions` how many the federation is asked for, `default_population` the population when
// --dp-population is not given (0: the flag is required, except for a tree), `seed` the simulator's seed (seeded noise)
// or nullopt (a server: OpenSSL's generator), `strategy_given` whether --strategy was on the command line. Throws
// CommandError naming the flag for settings that cannot be private or mean nothing.
// The plan's strategy replaces `strategy`, and `rounds` is cut to the versions --dp-budget allows;
// returns what --dry-run shows of both (PrintResolvedSettings' `derived`).
std::map<std::string, std::string> ApplyDpPlan(const DpPlan& plan, std::string* strategy, int64_t* rounds);

// --dp central with --secagg (its parsed parameters in *settings): the members clip their deltas to the
// plan's clip C themselves (settings->l2_clip; the server never sees a delta), weigh alike
// (weight-cap 1: dp_fedavg folds updates unweighted) and clip each value to C unless --secagg
// clip=R says so; the plan's dp_fedavg folds each group's sum (summed=true) and adds the noise.
// With --dp distributed the members add the noise too (settings->member_noise: each the share that
// makes any group the server can unmask carry Z·C) and the server none (noised_by_members=true).
// CommandError for adaptive clipping (its count needs each update's norm) and trees.
void PlanSecureDp(DpPlan* plan, SecAggSettings* settings);
// What a command does with --dp (*plan, if any) and --secagg (*settings, set when it was given):
// PlanSecureDp with both; --dp distributed without --secagg is a CommandError.
void PlanDpWithSecAgg(std::optional<DpPlan>* plan, std::optional<SecAggSettings>* settings);

std::optional<DpPlan> PlanDp(const DpFlags& flags, int64_t per_release, int64_t versions, int64_t default_population,
                             std::optional<uint64_t> seed, bool strategy_given);

// Prints what the plan releases and costs, and where the budget stops the federation.
void PrintDpPlan(const DpPlan& plan, int64_t versions_asked, double budget, const char* who);
// "epsilon 1.234" (or "epsilon inf" without noise) after `version`, for progress lines and titles.
std::string DpEpsilonText(const DpPlan& plan, int64_t version);
// The DP gauges for Prometheus after `version`: plexus_dp_epsilon (absent without noise: the
// versions are not private), plexus_dp_delta, plexus_dp_noise_multiplier, plexus_dp_clip.
std::string DpPrometheusText(const DpPlan& plan, int64_t version);
// The summary's privacy part for the rounds a federation published.
RunSummary::Privacy DpReport(const DpPlan& plan, const std::vector<RoundRecord>& rounds, int64_t versions_asked);

// The summary's privacy part for a simulation with local DP whose busiest client sent `releases`
// noised updates (LocalDpEpsilon of them).
RunSummary::Privacy LocalDpReport(const LocalDp& dp, int64_t releases, const std::string& noise_source);

}  // namespace plexus::cli
