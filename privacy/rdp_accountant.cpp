#include "privacy/rdp_accountant.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace plexus {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// log(e^a + e^b), exact at -infinity.
double LogAdd(double a, double b) {
  if (a == -kInf) return b;
  if (b == -kInf) return a;
  const double hi = std::max(a, b);
  return hi + std::log1p(std::exp(std::min(a, b) - hi));
}

// log(e^a − e^b) for a ≥ b; -infinity when they are equal. A term larger than the running sum
// can only come from rounding at the series' tail (the sum is positive): it is then dropped.
double LogSub(double a, double b) {
  if (b == -kInf) return a;
  if (a <= b) return a == b ? -kInf : a;
  return b + std::log(std::expm1(a - b));
}

// log(erfc(x)), also where erfc underflows (x beyond about 26): its asymptotic series.
double LogErfc(double x) {
  if (x < 25) return std::log(std::erfc(x));
  const double r = 1 / (x * x);
  return -x * x - std::log(x) - 0.5 * std::log(M_PI) + std::log1p(-0.5 * r + 0.75 * r * r - 1.875 * r * r * r);
}

// log A_α for an integer order: the binomial expansion, every term positive.
double LogAInteger(double q, double z, int64_t alpha) {
  double log_a = -kInf;
  for (int64_t k = 0; k <= alpha; ++k) {
    const double log_binomial = std::lgamma(static_cast<double>(alpha) + 1) - std::lgamma(static_cast<double>(k) + 1) -
                                std::lgamma(static_cast<double>(alpha - k) + 1);
    const double kd = static_cast<double>(k);
    const double term = log_binomial + kd * std::log(q) + static_cast<double>(alpha - k) * std::log1p(-q) +
                        (kd * kd - kd) / (2 * z * z);
    log_a = LogAdd(log_a, term);
  }
  return log_a;
}

// log A_α for a fractional order: the two series split at z₀ = z²·ln(1/q − 1) + ½ (Mironov, Talwar
// and Zhang 2019, §3.3), summed until both terms fall below e^-30 of their scale. The binomial
// coefficient's sign alternates past α; negative terms are subtracted.
double LogAFractional(double q, double z, double alpha) {
  double log_a0 = -kInf;
  double log_a1 = -kInf;
  const double z0 = z * z * std::log(1 / q - 1) + 0.5;
  double log_coefficient = 0;  // log |C(α, i)|
  bool positive = true;        // the sign of C(α, i)
  for (int64_t i = 0; i < 100000; ++i) {
    if (i > 0) {
      const double factor = (alpha - static_cast<double>(i - 1)) / static_cast<double>(i);
      log_coefficient += std::log(std::fabs(factor));
      if (factor < 0) positive = !positive;
    }
    const double id = static_cast<double>(i);
    const double j = alpha - id;
    const double log_t0 = log_coefficient + id * std::log(q) + j * std::log1p(-q);
    const double log_t1 = log_coefficient + j * std::log(q) + id * std::log1p(-q);
    const double log_e0 = std::log(0.5) + LogErfc((id - z0) / (M_SQRT2 * z));
    const double log_e1 = std::log(0.5) + LogErfc((z0 - j) / (M_SQRT2 * z));
    const double log_s0 = log_t0 + (id * id - id) / (2 * z * z) + log_e0;
    const double log_s1 = log_t1 + (j * j - j) / (2 * z * z) + log_e1;
    if (positive) {
      log_a0 = LogAdd(log_a0, log_s0);
      log_a1 = LogAdd(log_a1, log_s1);
    } else {
      log_a0 = LogSub(log_a0, log_s0);
      log_a1 = LogSub(log_a1, log_s1);
    }
    if (std::max(log_s0, log_s1) < -30) break;
  }
  return LogAdd(log_a0, log_a1);
}

Status CheckSampling(double q, double z) {
  if (!(q > 0 && q <= 1))
    return InvalidArgumentError("the sampling rate q must be in (0, 1], got " + std::to_string(q));
  if (!(z > 0) || !std::isfinite(z)) {
    return InvalidArgumentError("the noise multiplier must be positive and finite, got " + std::to_string(z));
  }
  return Status::Ok();
}

Status CheckOrders(const std::vector<double>& orders) {
  if (orders.empty()) return InvalidArgumentError("no RDP orders");
  for (double a : orders) {
    if (!(a > 1) || !std::isfinite(a)) return InvalidArgumentError("RDP orders must be finite and above 1");
  }
  return Status::Ok();
}

Status CheckTarget(int64_t releases, double delta, double epsilon) {
  if (releases < 1) return InvalidArgumentError("the number of releases must be at least 1");
  if (!(delta > 0 && delta < 1)) return InvalidArgumentError("delta must be in (0, 1), got " + std::to_string(delta));
  if (!(epsilon > 0) || !std::isfinite(epsilon)) return InvalidArgumentError("epsilon must be positive and finite");
  return Status::Ok();
}

// The smallest z in [0.01, 1000] (to 0.1%) whose ε (a decreasing function of z) is within target.
template <typename EpsilonOf>
Result<double> SmallestNoise(double epsilon, EpsilonOf epsilon_of) {
  double hi = 1000;
  Result<double> at_hi = epsilon_of(hi);
  if (!at_hi.ok()) return at_hi.status();
  if (*at_hi > epsilon) {
    return OutOfRangeError("epsilon " + std::to_string(epsilon) + " is not met even with noise multiplier 1000");
  }
  double lo = 0.01;
  Result<double> at_lo = epsilon_of(lo);
  if (!at_lo.ok()) return at_lo.status();
  if (*at_lo <= epsilon) return lo;
  while (hi / lo > 1.001) {
    const double mid = std::sqrt(lo * hi);
    Result<double> at_mid = epsilon_of(mid);
    if (!at_mid.ok()) return at_mid.status();
    (*at_mid <= epsilon ? hi : lo) = mid;
  }
  return hi;
}

}  // namespace

const std::vector<double>& DefaultRdpOrders() {
  static const std::vector<double> orders = [] {
    std::vector<double> o;
    for (int tenth = 11; tenth <= 109; ++tenth) o.push_back(tenth / 10.0);
    for (int a = 11; a <= 63; ++a) o.push_back(a);
    for (double a : {128.0, 256.0, 512.0, 1024.0}) o.push_back(a);
    return o;
  }();
  return orders;
}

Result<std::vector<double>> SampledGaussianRdp(double q, double noise_multiplier, const std::vector<double>& orders) {
  if (Status s = CheckSampling(q, noise_multiplier); !s.ok()) return s;
  if (Status s = CheckOrders(orders); !s.ok()) return s;
  const double z = noise_multiplier;
  std::vector<double> rdp;
  rdp.reserve(orders.size());
  for (double alpha : orders) {
    if (q == 1) {
      rdp.push_back(alpha / (2 * z * z));
      continue;
    }
    const double log_a =
        alpha == std::floor(alpha) ? LogAInteger(q, z, static_cast<int64_t>(alpha)) : LogAFractional(q, z, alpha);
    rdp.push_back(log_a / (alpha - 1));
  }
  return rdp;
}

Result<std::vector<double>> TreeAggregationRdp(double noise_multiplier, int64_t releases, int64_t restart_every,
                                               const std::vector<double>& orders, int64_t participations) {
  if (Status s = CheckSampling(1, noise_multiplier); !s.ok()) return s;
  if (Status s = CheckOrders(orders); !s.ok()) return s;
  if (releases < 0 || restart_every < 0) return InvalidArgumentError("releases and restart_every must not be negative");
  if (participations < 1) return InvalidArgumentError("participations per tree must be at least 1");
  // Trees of restart_every releases, then one of what is left; a tree of n releases has depth
  // ⌈log₂(n+1)⌉: a contribution enters that many nodes' noised sums.
  double depths = 0;
  const int64_t tree = restart_every == 0 ? std::max<int64_t>(releases, 1) : restart_every;
  auto depth = [](int64_t n) { return n == 0 ? 0.0 : std::ceil(std::log2(static_cast<double>(n) + 1)); };
  depths += static_cast<double>(releases / tree) * depth(tree) + depth(releases % tree);
  std::vector<double> rdp;
  rdp.reserve(orders.size());
  const double m = static_cast<double>(participations);
  for (double alpha : orders) rdp.push_back(alpha * m * m * depths / (2 * noise_multiplier * noise_multiplier));
  return rdp;
}

Result<PrivacySpent> EpsilonFromRdp(const std::vector<double>& rdp, const std::vector<double>& orders, double delta,
                                    EpsilonConversion conversion) {
  if (rdp.size() != orders.size()) return InvalidArgumentError("an RDP curve and its orders differ in length");
  if (!(delta > 0 && delta < 1)) return InvalidArgumentError("delta must be in (0, 1), got " + std::to_string(delta));
  if (Status s = CheckOrders(orders); !s.ok()) return s;
  PrivacySpent best{kInf, orders.front()};
  for (size_t i = 0; i < orders.size(); ++i) {
    const double a = orders[i];
    double eps = 0;
    if (conversion == EpsilonConversion::kClassic) {
      eps = rdp[i] - std::log(delta) / (a - 1);
    } else {
      eps = rdp[i] + std::log((a - 1) / a) - (std::log(delta) + std::log(a)) / (a - 1);
    }
    if (std::isnan(eps)) continue;
    if (eps < best.epsilon) best = {std::max(eps, 0.0), a};
  }
  return best;
}

Result<PrivacySpent> EpsilonAfterReleases(const std::vector<double>& rdp_per_release, int64_t releases, double delta,
                                          EpsilonConversion conversion) {
  if (releases < 0) return InvalidArgumentError("a negative number of releases");
  if (releases == 0 && delta > 0 && delta < 1) return PrivacySpent{0, DefaultRdpOrders().front()};
  std::vector<double> rdp = rdp_per_release;
  for (double& r : rdp) r *= static_cast<double>(releases);
  return EpsilonFromRdp(rdp, DefaultRdpOrders(), delta, conversion);
}

Result<double> NoiseForEpsilon(double q, int64_t releases, double delta, double epsilon) {
  if (Status s = CheckSampling(q, 1); !s.ok()) return s;
  if (Status s = CheckTarget(releases, delta, epsilon); !s.ok()) return s;
  return SmallestNoise(epsilon, [&](double z) -> Result<double> {
    PrivacyAccountant accountant;
    if (Status s = accountant.AddSampledGaussian(q, z, releases); !s.ok()) return s;
    Result<PrivacySpent> spent = accountant.Spent(delta);
    if (!spent.ok()) return spent.status();
    return spent->epsilon;
  });
}

Result<double> TreeNoiseForEpsilon(int64_t releases, int64_t restart_every, double delta, double epsilon,
                                   int64_t participations) {
  if (Status s = CheckTarget(releases, delta, epsilon); !s.ok()) return s;
  return SmallestNoise(epsilon, [&](double z) -> Result<double> {
    Result<std::vector<double>> rdp =
        TreeAggregationRdp(z, releases, restart_every, DefaultRdpOrders(), participations);
    if (!rdp.ok()) return rdp.status();
    Result<PrivacySpent> spent = EpsilonFromRdp(*rdp, DefaultRdpOrders(), delta, EpsilonConversion::kImproved);
    if (!spent.ok()) return spent.status();
    return spent->epsilon;
  });
}

PrivacyAccountant::PrivacyAccountant(std::vector<double> orders)
    : orders_(std::move(orders)), rdp_(orders_.size(), 0.0) {}

Status PrivacyAccountant::AddSampledGaussian(double q, double noise_multiplier, int64_t count) {
  if (count < 0) return InvalidArgumentError("a negative number of releases");
  Result<std::vector<double>> one = SampledGaussianRdp(q, noise_multiplier, orders_);
  if (!one.ok()) return one.status();
  for (size_t i = 0; i < rdp_.size(); ++i) rdp_[i] += static_cast<double>(count) * (*one)[i];
  releases_ += count;
  return Status::Ok();
}

Status PrivacyAccountant::AddRdp(const std::vector<double>& rdp, int64_t releases) {
  if (rdp.size() != rdp_.size()) return InvalidArgumentError("an RDP curve over other orders than the accountant's");
  if (releases < 0) return InvalidArgumentError("a negative number of releases");
  for (double r : rdp) {
    if (!(r >= 0)) return InvalidArgumentError("an RDP cost must be non-negative");
  }
  for (size_t i = 0; i < rdp_.size(); ++i) rdp_[i] += rdp[i];
  releases_ += releases;
  return Status::Ok();
}

Result<PrivacySpent> PrivacyAccountant::Spent(double delta, EpsilonConversion conversion) const {
  if (releases_ == 0 && (delta > 0 && delta < 1)) return PrivacySpent{0, orders_.front()};  // nothing released
  return EpsilonFromRdp(rdp_, orders_, delta, conversion);
}

double LocalDpEpsilon(double noise_multiplier, int64_t releases) {
  if (releases <= 0) return 0;
  if (noise_multiplier <= 0) return std::numeric_limits<double>::infinity();
  Result<std::vector<double>> rdp = SampledGaussianRdp(1.0, noise_multiplier / 2, DefaultRdpOrders());
  if (!rdp.ok()) return std::numeric_limits<double>::infinity();
  Result<PrivacySpent> spent = EpsilonAfterReleases(*rdp, releases, 1e-5);
  return spent.ok() ? spent->epsilon : std::numeric_limits<double>::infinity();
}

}  // namespace plexus
