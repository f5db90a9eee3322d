// The privacy accountant: what a sequence of differentially private releases costs, as (ε, δ).
//
// Each release is a Gaussian mechanism of sensitivity C and noise standard deviation z·C, applied
// either to a Poisson sample of the population with rate q (the sampled Gaussian mechanism,
// Mironov, Talwar and Zhang 2019) or inside a tree aggregation (DP-FTRL, Kairouz et al. 2021).
// Costs are kept as Rényi differential privacy (RDP) at a list of orders α, where composition is a
// sum, and converted to ε at a δ by the better of the orders. Two conversions: the classic one
// (Mironov 2017: RDP(α) + ln(1/δ)/(α−1)) and the improved one of Balle et al. 2020 (what Opacus and
// Google's dp_accounting report); `plexus privacy` prints both.
//
// The fractional orders' series is summed exactly, subtracting its negative terms as Opacus and
// the original TensorFlow Privacy do (dp_accounting adds their absolute values, an upper bound that
// differs by a few percent for z < 1 with large q). Reference values and sources:
// docs/privacy.md. Pure functions and a value type; thread-compatible.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace plexus {

// The orders ε is minimised over: 1.1 to 10.9 by 0.1, 11 to 63, 128, 256, 512 and 1024.
const std::vector<double>& DefaultRdpOrders();

// The RDP at each order of one release of the sampled Gaussian mechanism with sampling rate q in
// (0, 1] and noise multiplier z > 0. InvalidArgument for anything else (z = 0 is no privacy).
Result<std::vector<double>> SampledGaussianRdp(double q, double noise_multiplier, const std::vector<double>& orders);

// The RDP at each order of `releases` releases of tree aggregation with noise multiplier z at each
// node, the tree restarted every `restart_every` releases (0: never), when no client contributes
// more than m = `participations` times to one tree: each tree of n releases costs
// α·m²·⌈log₂(n+1)⌉/(2z²) (a contribution enters one node per level; m of them add at most m·C
// to a node), trees add. InvalidArgument for z ≤ 0, negative counts or m < 1.
Result<std::vector<double>> TreeAggregationRdp(double noise_multiplier, int64_t releases, int64_t restart_every,
                                               const std::vector<double>& orders, int64_t participations = 1);

enum class EpsilonConversion { kClassic, kImproved };

struct PrivacySpent {
  double epsilon = 0;
  double order = 0;  // the order that gave it
};

// ε at δ in (0, 1) for the given RDP curve, minimised over the orders. InvalidArgument for a δ
// outside (0, 1) or curves of different lengths; ε is +infinity when every order's RDP is.
Result<PrivacySpent> EpsilonFromRdp(const std::vector<double>& rdp, const std::vector<double>& orders, double delta,
                                    EpsilonConversion conversion);

// ε at δ after `releases` releases that each cost `rdp_per_release` (at DefaultRdpOrders()):
// composition (RDP adds), then EpsilonFromRdp. ε is 0 for no release.
Result<PrivacySpent> EpsilonAfterReleases(const std::vector<double>& rdp_per_release, int64_t releases, double delta,
                                          EpsilonConversion conversion = EpsilonConversion::kImproved);

// The smallest noise multiplier (to 0.1%) for which `releases` releases of the sampled Gaussian
// mechanism at rate q stay within ε at δ (improved conversion). InvalidArgument for bad arguments;
// OutOfRange when even z = 1000 does not meet ε.
Result<double> NoiseForEpsilon(double q, int64_t releases, double delta, double epsilon);
// The same for tree aggregation restarted every `restart_every` releases.
Result<double> TreeNoiseForEpsilon(int64_t releases, int64_t restart_every, double delta, double epsilon,
                                   int64_t participations = 1);

// Local DP: what `releases` updates of one client, each clipped to L2 norm C and given
// N(0, (Z·C)²) noise per value before it leaves, cost against whoever sees them. Each is the
// Gaussian mechanism with sensitivity 2C (two clipped updates lie within 2C of each other), so
// noise multiplier Z/2, no sampling. ε at δ = 1e-5 (improved conversion); +infinity without
// noise, 0 without releases.
double LocalDpEpsilon(double noise_multiplier, int64_t releases);

// The RDP spent so far, release by release: what a server or simulator keeps while it publishes.
// Value type; thread-compatible.
class PrivacyAccountant {
 public:
  explicit PrivacyAccountant(std::vector<double> orders = DefaultRdpOrders());

  // Adds `count` releases of the sampled Gaussian mechanism. InvalidArgument (and nothing added)
  // for q outside (0, 1], z ≤ 0 or a negative count.
  Status AddSampledGaussian(double q, double noise_multiplier, int64_t count = 1);
  // Adds a cost computed elsewhere (e.g. TreeAggregationRdp over the same orders).
  Status AddRdp(const std::vector<double>& rdp, int64_t releases);

  Result<PrivacySpent> Spent(double delta, EpsilonConversion conversion = EpsilonConversion::kImproved) const;
  int64_t releases() const { return releases_; }
  const std::vector<double>& orders() const { return orders_; }

 private:
  std::vector<double> orders_;
  std::vector<double> rdp_;
  int64_t releases_ = 0;
};

}  // namespace plexus
