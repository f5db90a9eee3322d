#include "apps/plexus/dp_flags.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "aggregators/registry.h"
#include "aggregators/strategy_spec.h"
#include "apps/plexus/commands.h"
#include "apps/plexus/local_dp_flag.h"
#include "privacy/rdp_accountant.h"

namespace plexus::cli {
namespace {

std::string Number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

// The most releases within `budget` (0: no budget), bisected on the accountant.
void SetBudget(double budget, DpPlan* plan) {
  if (budget <= 0) return;
  if (plan->noise == 0) throw CommandError("--dp-budget needs noise above 0: without noise no release is private");
  if (plan->EpsilonAfter(1) > budget) {
    throw CommandError("--dp-budget " + Number(budget) + " is spent by the first version (epsilon " +
                       Number(plan->EpsilonAfter(1)) + "): raise the budget or the noise");
  }
  int64_t lo = 1, hi = 1;  // ε(lo) ≤ budget; find hi with ε(hi) > budget, then bisect
  while (hi < (int64_t{1} << 40) && plan->EpsilonAfter(hi) <= budget) {
    lo = hi;
    hi *= 2;
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (plan->EpsilonAfter(mid) <= budget ? lo : hi) = mid;
  }
  plan->max_releases = lo;
}

// --dp tree: DP-FTRL. No sampling rate; the population, when known, must be able to fill a tree
// with each client contributing at most `participations` times, or rounds would stop for want of
// clients the strategy may take.
DpPlan PlanTree(const DpFlags& f, DpPlan plan, int64_t per_release, int64_t versions, int64_t population,
                std::optional<uint64_t> seed) {
  if (plan.restart < 0) throw CommandError("--dp tree: restart must be at least 0 (0: one tree)");
  if (plan.participations < 1) throw CommandError("--dp tree: participations must be at least 1");
  const int64_t per_tree = plan.restart > 0 ? std::min(plan.restart, versions) : versions;
  if (population > 0 && per_release * per_tree > population * plan.participations) {
    throw CommandError("--dp tree: a tree of " + std::to_string(per_tree) + " versions takes " +
                       std::to_string(per_release * per_tree) + " contributions, more than " +
                       std::to_string(population) + " clients may make at " + std::to_string(plan.participations) +
                       " each: lower restart or raise participations");
  }
  plan.expected = static_cast<double>(per_release);
  plan.delta = f.delta;
  plan.noise_source = seed ? "seeded(seed=" + std::to_string(*seed) + ")" : "openssl";
  plan.strategy = "dp_ftrl:clip=" + Number(plan.clip) + ",noise=" + Number(plan.noise) +
                  ",expected=" + Number(plan.expected) + ",restart=" + std::to_string(plan.restart) +
                  ",participations=" + std::to_string(plan.participations);
  if (seed) plan.strategy += ",seed=" + std::to_string(*seed);
  Take(MakeAggregator(plan.strategy, nullptr), "--dp");
  SetBudget(f.budget, &plan);
  return plan;
}

}  // namespace

void AddDpFlags(CLI::App* cmd, DpFlags* f) {
  cmd->add_option("--dp", f->dp,
                  "Differential privacy: central:clip=C,noise=Z[,per_release=N] (clip each update to L2 norm C, add "
                  "Gaussian noise Z*C to each version's sum; N: the client updates a version takes, by default the "
                  "clients per round, which at a root over edges count edges), "
                  "adaptive:clip=C0,noise=Z[,target=0.5,lr=0.2,count_noise=N] (the "
                  "clip follows the target quantile of update norms), "
                  "tree:clip=C,noise=Z[,restart=K,participations=M,per_release=N] "
                  "(DP-FTRL: no sampling assumed; each client at most M times per tree of K versions, 0: one tree), "
                  "local:clip=C,noise=Z (the clients clip and noise: a server refuses clients announcing anything "
                  "else; the simulator's clients do it as plexus client does), or distributed:clip=C,noise=Z (with "
                  "--secagg: the members of each secure group clip and add shares of the noise that sum to Z*C at "
                  "least, the server adds none); docs/privacy.md");
  cmd->add_option("--dp-population", f->population,
                  "DP: every client that could ever be picked, for the sampling rate the accountant assumes");
  cmd->add_option("--dp-delta", f->delta, "DP: delta of (epsilon, delta)")->capture_default_str();
  cmd->add_option("--dp-budget", f->budget,
                  "DP: end the federation before the version that would take epsilon past this (0: no budget)")
      ->capture_default_str();
}

double DpPlan::EpsilonAfter(int64_t releases) const {
  if (releases <= 0) return 0;
  if (noise == 0) return std::numeric_limits<double>::infinity();
  if (tree) {
    Result<std::vector<double>> rdp = TreeAggregationRdp(noise, releases, restart, DefaultRdpOrders(), participations);
    if (!rdp.ok()) return std::numeric_limits<double>::infinity();
    Result<PrivacySpent> spent = EpsilonFromRdp(*rdp, DefaultRdpOrders(), delta, EpsilonConversion::kImproved);
    return spent.ok() ? spent->epsilon : std::numeric_limits<double>::infinity();
  }
  Result<PrivacySpent> spent = EpsilonAfterReleases(rdp_per_release, releases, delta);
  return spent.ok() ? spent->epsilon : std::numeric_limits<double>::infinity();
}

std::optional<DpPlan> PlanDp(const DpFlags& f, int64_t per_release, int64_t versions, int64_t default_population,
                             std::optional<uint64_t> seed, bool strategy_given) {
  if (f.dp.empty()) {
    if (f.population != 0) throw CommandError("--dp-population needs --dp");
    if (f.budget != 0) throw CommandError("--dp-budget needs --dp");
    return std::nullopt;
  }
  StrategySpec spec = Take(StrategySpec::Parse(f.dp), "--dp");
  DpPlan plan;
  if (spec.name() != "central" && spec.name() != "adaptive" && spec.name() != "tree" && spec.name() != "distributed") {
    throw CommandError(
        "--dp must be central:clip=C,noise=Z, adaptive:clip=C0,noise=Z,..., tree:clip=C,noise=Z,..., "
        "local:clip=C,noise=Z or distributed:clip=C,noise=Z (got '" +
        spec.name() + "')");
  }
  plan.distributed = spec.name() == "distributed";
  plan.adaptive = spec.name() == "adaptive";
  plan.tree = spec.name() == "tree";
  ReadClipAndNoise(spec, &plan.clip, &plan.noise);
  double target = 0.5, lr = 0.2, count_noise = -1;
  if (plan.adaptive) {
    target = Take(spec.GetDouble("target", target), "--dp");
    lr = Take(spec.GetDouble("lr", lr), "--dp");
    count_noise = Take(spec.GetDouble("count_noise", count_noise), "--dp");
  }
  if (plan.tree) {
    plan.restart = Take(spec.GetCount("restart", 0), "--dp");
    plan.participations = Take(spec.GetCount("participations", 1), "--dp");
  }
  if (plan.tree || spec.name() == "central") {
    // At a root over edges a version takes the edges' client updates, not one per edge.
    const int64_t given = Take(spec.GetCount("per_release", 0), "--dp");
    if (given < 0) throw CommandError("--dp " + spec.name() + ": per_release must be at least 1");
    if (given > 0) {
      per_release = given;
      plan.per_release_given = true;
    }
  }
  Check(spec.CheckAllUsed(), "--dp");
  if (strategy_given) {
    throw CommandError(
        "--dp and --strategy cannot be combined: DP needs each update's influence bounded by its clip, which --dp's "
        "own averaging gives and a robust rule's or a weighted mean's does not");
  }
  if (!(f.delta > 0 && f.delta < 1)) throw CommandError("--dp-delta must be in (0, 1)");
  if (f.budget < 0 || !std::isfinite(f.budget)) throw CommandError("--dp-budget must be at least 0");
  const int64_t population = f.population > 0 ? f.population : default_population;
  if (plan.tree) return PlanTree(f, std::move(plan), per_release, versions, population, seed);
  if (population <= 0) {
    throw CommandError(
        "--dp needs --dp-population: how many clients could ever be picked (the accountant's sampling rate is "
        "clients per version over it)");
  }
  if (per_release > population) {
    throw CommandError("--dp-population " + std::to_string(population) + " is smaller than the " +
                       std::to_string(per_release) + " updates each version takes");
  }
  plan.expected = static_cast<double>(per_release);
  plan.q = static_cast<double>(per_release) / static_cast<double>(population);
  plan.delta = f.delta;
  plan.noise_source = seed ? "seeded(seed=" + std::to_string(*seed) + ")" : "openssl";
  plan.strategy =
      "dp_fedavg:clip=" + Number(plan.clip) + ",noise=" + Number(plan.noise) + ",expected=" + Number(plan.expected);
  if (plan.adaptive) {
    plan.strategy += ",adaptive=true,target=" + Number(target) + ",clip_lr=" + Number(lr);
    if (count_noise >= 0) plan.strategy += ",count_noise=" + Number(count_noise);
  }
  if (seed) plan.strategy += ",seed=" + std::to_string(*seed);
  Take(MakeAggregator(plan.strategy, nullptr), "--dp");
  if (plan.noise > 0) plan.rdp_per_release = Take(SampledGaussianRdp(plan.q, plan.noise, DefaultRdpOrders()), "--dp");
  SetBudget(f.budget, &plan);
  return plan;
}

void PrintDpPlan(const DpPlan& plan, int64_t versions_asked, double budget, const char* who) {
  std::string how;
  if (plan.tree) {
    how = "tree aggregation (DP-FTRL, no sampling assumed; each client at most " + std::to_string(plan.participations) +
          " time(s) per tree" +
          (plan.restart > 0 ? " of " + std::to_string(plan.restart) + " versions" : ", one tree") + ")";
  } else {
    char rate[64];
    std::snprintf(rate, sizeof rate, "sampling rate %.4g", plan.q);
    how = rate;
  }
  std::printf(
      "%s: %s, clip %g%s, noise multiplier %g (noise from %s), %g updates per version, %s; epsilon at delta %g "
      "after %lld versions: %.4g\n",
      who, plan.distributed ? "distributed DP (the members of each secure group add the noise)" : "central DP",
      plan.clip, plan.adaptive ? " to start (adaptive)" : "", plan.noise, plan.noise_source.c_str(), plan.expected,
      how.c_str(), plan.delta, static_cast<long long>(versions_asked), plan.EpsilonAfter(versions_asked));
  if (plan.noise == 0) std::printf("%s: noise 0: updates are clipped but the versions are NOT private\n", who);
  if (plan.max_releases > 0 && plan.max_releases < versions_asked) {
    std::printf("%s: --dp-budget %g allows %lld versions: the federation stops there (epsilon %.4g)\n", who, budget,
                static_cast<long long>(plan.max_releases), plan.EpsilonAfter(plan.max_releases));
  }
  std::fflush(stdout);
}

std::string DpEpsilonText(const DpPlan& plan, int64_t version) {
  char text[48];
  std::snprintf(text, sizeof text, "epsilon %.4g", plan.EpsilonAfter(version));
  return text;
}

std::string DpPrometheusText(const DpPlan& plan, int64_t version) {
  std::string out;
  auto gauge = [&out](const char* name, const char* help, double value) {
    char line[320];
    std::snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s gauge\n%s %.17g\n", name, help, name, name, value);
    out += line;
  };
  const double epsilon = plan.EpsilonAfter(version);
  if (std::isfinite(epsilon))
    gauge("plexus_dp_epsilon", "Epsilon spent by the published versions at plexus_dp_delta", epsilon);
  gauge("plexus_dp_delta", "Delta of the reported epsilon", plan.delta);
  gauge("plexus_dp_noise_multiplier", "Noise multiplier z of central DP", plan.noise);
  gauge("plexus_dp_clip", "Clip C of central DP (the starting clip when adaptive)", plan.clip);
  return out;
}

RunSummary::Privacy DpReport(const DpPlan& plan, const std::vector<RoundRecord>& rounds, int64_t versions_asked) {
  RunSummary::Privacy p;
  p.delta = plan.delta;
  p.noise_multiplier = plan.noise;
  p.clip = plan.clip;
  p.sampling_rate = plan.q;
  p.adaptive = plan.adaptive;
  p.mechanism = plan.tree ? "tree" : plan.distributed ? "distributed" : "sampled";
  p.restart = plan.restart;
  p.participations = plan.participations;
  p.noise_source = plan.noise_source;
  p.budget_releases = plan.max_releases;
  int64_t last = 0;
  for (const RoundRecord& r : rounds) {
    last = static_cast<int64_t>(r.model_version);
    p.round_epsilon.push_back(plan.EpsilonAfter(last));
  }
  p.epsilon = plan.EpsilonAfter(last);
  p.stopped_by_budget = plan.max_releases > 0 && plan.max_releases < versions_asked && last >= plan.max_releases;
  return p;
}

RunSummary::Privacy LocalDpReport(const LocalDp& dp, int64_t releases, const std::string& noise_source) {
  RunSummary::Privacy p;
  p.delta = 1e-5;
  p.noise_multiplier = dp.noise;
  p.clip = dp.clip;
  p.mechanism = "local";
  p.noise_source = noise_source;
  p.epsilon = LocalDpEpsilon(dp, releases);
  return p;
}

std::map<std::string, std::string> ApplyDpPlan(const DpPlan& plan, std::string* strategy, int64_t* rounds) {
  std::map<std::string, std::string> derived;
  *strategy = plan.strategy;
  derived["strategy"] = plan.strategy + "  (from --dp)";
  if (plan.max_releases > 0 && *rounds > plan.max_releases) {
    derived["rounds"] =
        std::to_string(plan.max_releases) + "  (" + std::to_string(*rounds) + " asked, cut to what --dp-budget allows)";
    *rounds = plan.max_releases;
  }
  return derived;
}

void PlanSecureDp(DpPlan* plan, SecAggSettings* settings) {
  if (plan->adaptive) {
    throw CommandError(
        "--dp adaptive with --secagg: adaptive clipping counts the updates under the clip, which the "
        "server no longer sees; use --dp central:clip=C,noise=Z");
  }
  if (plan->tree) {
    throw CommandError(
        "--dp tree with --secagg: DP-FTRL's tree noise over secure groups is not built; use --dp "
        "central:clip=C,noise=Z");
  }
  settings->l2_clip = plan->clip;
  settings->weight_cap = 1;
  if (plan->distributed) settings->member_noise = plan->noise;
  // Each value is clipped to C (a delta of norm C has none larger), and with the members' noise
  // to C plus four of its standard deviations (a group's threshold is 2 at least).
  if (!settings->clip_given) {
    settings->clip = plan->clip * (1 + (plan->distributed ? 4 * plan->noise / std::sqrt(2.0) : 0.0));
  }
  plan->strategy += plan->distributed ? ",summed=true,noised_by_members=true" : ",summed=true";
}

void PlanDpWithSecAgg(std::optional<DpPlan>* plan, std::optional<SecAggSettings>* settings) {
  if (!*plan) return;
  if (!*settings) {
    if ((*plan)->distributed) {
      throw CommandError(
          "--dp distributed needs --secagg: the members' shares of the noise protect only a sum the "
          "server cannot take apart (without it, --dp central or --dp local)");
    }
    return;
  }
  PlanSecureDp(&**plan, &**settings);
}

}  // namespace plexus::cli
