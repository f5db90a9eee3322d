// plexus privacy: the accountant as a calculator. What T releases at sampling rate q and noise z
// cost (ε at δ, both conversions), or the smallest noise that keeps them within an ε.
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "apps/plexus/commands.h"
#include "privacy/rdp_accountant.h"

namespace plexus::cli {
namespace {

struct PrivacyFlags {
  std::string mechanism = "sampled";
  double q = 0;
  double noise = 0;
  int64_t releases = 0;
  int64_t restart = 0;
  int64_t participations = 1;
  double delta = 1e-5;
  double epsilon = 0;
  bool json = false;
};

// The mechanism's RDP per release at the default orders (a tree's is for all its releases).
std::vector<double> Rdp(const PrivacyFlags& f) {
  if (f.mechanism == "tree") {
    return Take(TreeAggregationRdp(f.noise, f.releases, f.restart, DefaultRdpOrders(), f.participations), "--noise");
  }
  return Take(SampledGaussianRdp(f.q, f.noise, DefaultRdpOrders()), "--q/--noise");
}

std::string Describe(const PrivacyFlags& f) {
  char line[256];
  if (f.mechanism == "tree") {
    std::snprintf(line, sizeof line,
                  "tree aggregation (DP-FTRL), %lld releases, tree restarted %s, each client at most %lld time(s) "
                  "per tree",
                  static_cast<long long>(f.releases),
                  f.restart == 0 ? "never" : ("every " + std::to_string(f.restart) + " releases").c_str(),
                  static_cast<long long>(f.participations));
  } else {
    std::snprintf(line, sizeof line, "sampled Gaussian mechanism, sampling rate q = %.6g, %lld releases", f.q,
                  static_cast<long long>(f.releases));
  }
  return line;
}

void RunPrivacy(const PrivacyFlags& f) {
  if (f.mechanism != "sampled" && f.mechanism != "tree") {
    throw CommandError("--mechanism must be sampled or tree (got '" + f.mechanism + "')");
  }
  if (f.releases < 1) throw CommandError("--releases must be at least 1");
  if (!(f.delta > 0 && f.delta < 1)) throw CommandError("--delta must be in (0, 1)");
  if (f.mechanism == "sampled" && !(f.q > 0 && f.q <= 1)) {
    throw CommandError("--q must be in (0, 1]: the fraction of the population each release samples");
  }
  if (f.mechanism == "tree" && f.q != 0)
    throw CommandError("--q is for --mechanism sampled: a tree assumes no sampling");
  if (f.restart < 0) throw CommandError("--restart must not be negative");
  if (f.participations < 1) throw CommandError("--participations must be at least 1");
  if (f.mechanism != "tree" && (f.restart != 0 || f.participations != 1))
    throw CommandError("--restart and --participations are for --mechanism tree");
  const bool want_noise = f.epsilon != 0;
  if (want_noise == (f.noise != 0)) {
    throw CommandError("give either --noise (to get epsilon) or --epsilon (to get the noise multiplier)");
  }
  if (want_noise) {
    if (!(f.epsilon > 0) || !std::isfinite(f.epsilon)) throw CommandError("--epsilon must be positive");
    const double z =
        Take(f.mechanism == "tree" ? TreeNoiseForEpsilon(f.releases, f.restart, f.delta, f.epsilon, f.participations)
                                   : NoiseForEpsilon(f.q, f.releases, f.delta, f.epsilon),
             "--epsilon");
    if (f.json) {
      std::printf(
          "{\"mechanism\": \"%s\", \"q\": %.17g, \"releases\": %lld, \"restart\": %lld, \"participations\": %lld, "
          "\"delta\": %.17g, "
          "\"epsilon\": %.17g, \"noise_multiplier\": %.17g}\n",
          f.mechanism.c_str(), f.q, static_cast<long long>(f.releases), static_cast<long long>(f.restart),
          static_cast<long long>(f.participations), f.delta, f.epsilon, z);
      return;
    }
    std::printf("%s\n", Describe(f).c_str());
    std::printf("smallest noise multiplier for epsilon %.4g at delta %.3g: %.4g (improved conversion, to 0.1%%)\n",
                f.epsilon, f.delta, z);
    return;
  }
  if (!(f.noise > 0) || !std::isfinite(f.noise)) throw CommandError("--noise must be positive");
  const std::vector<double> rdp = Rdp(f);
  const int64_t composed = f.mechanism == "tree" ? 1 : f.releases;  // a tree's RDP already covers every release
  const PrivacySpent improved =
      Take(EpsilonAfterReleases(rdp, composed, f.delta, EpsilonConversion::kImproved), "--delta");
  const PrivacySpent classic =
      Take(EpsilonAfterReleases(rdp, composed, f.delta, EpsilonConversion::kClassic), "--delta");
  if (f.json) {
    std::printf(
        "{\"mechanism\": \"%s\", \"q\": %.17g, \"noise_multiplier\": %.17g, \"releases\": %lld, "
        "\"restart\": %lld, \"participations\": %lld, \"delta\": %.17g, \"epsilon\": %.17g, \"epsilon_order\": %.17g, "
        "\"epsilon_classic\": %.17g, \"epsilon_classic_order\": %.17g}\n",
        f.mechanism.c_str(), f.q, f.noise, static_cast<long long>(f.releases), static_cast<long long>(f.restart),
        static_cast<long long>(f.participations), f.delta, improved.epsilon, improved.order, classic.epsilon,
        classic.order);
    return;
  }
  std::printf("%s, noise multiplier %.4g\n", Describe(f).c_str(), f.noise);
  std::printf("epsilon at delta %.3g: %.4f (improved conversion, Balle et al. 2020; RDP order %.4g)\n", f.delta,
              improved.epsilon, improved.order);
  std::printf("                       %.4f (classic conversion, Mironov 2017; RDP order %.4g)\n", classic.epsilon,
              classic.order);
}

}  // namespace

void AddPrivacyCommand(CLI::App& app) {
  auto f = std::make_shared<PrivacyFlags>();
  CLI::App* cmd = app.add_subcommand(
      "privacy", "Privacy accountant: epsilon of T differentially private releases, or the noise an epsilon needs");
  cmd->add_option("--mechanism", f->mechanism,
                  "sampled (the Gaussian mechanism on a Poisson sample of rate --q) or tree (DP-FTRL tree "
                  "aggregation, no sampling)")
      ->capture_default_str();
  cmd->add_option("--q", f->q, "Sampling rate per release: clients per round over the population (sampled only)");
  cmd->add_option("--noise", f->noise, "Noise multiplier z: the noise's standard deviation over the clip");
  cmd->add_option("--releases", f->releases, "Number of releases T (rounds, or buffers in FedBuff)")->required();
  cmd->add_option("--restart", f->restart, "Tree only: restart the tree every K releases (0: never)")
      ->capture_default_str();
  cmd->add_option("--participations", f->participations, "Tree only: the most times one client contributes to one tree")
      ->capture_default_str();
  cmd->add_option("--delta", f->delta, "delta of (epsilon, delta)-DP")->capture_default_str();
  cmd->add_option("--epsilon", f->epsilon, "Target epsilon: print the smallest noise multiplier meeting it");
  cmd->add_flag("--json", f->json, "Print one JSON object instead of sentences");
  AddConfigOption(cmd);
  cmd->callback([f] { RunPrivacy(*f); });
}

}  // namespace plexus::cli
