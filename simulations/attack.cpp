#include "simulations/attack.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "aggregators/strategy_spec.h"

namespace plexus {
namespace {

// Inverse of the standard normal CDF (Acklam's rational approximation, relative error < 1.2e-9).
double NormalQuantile(double p) {
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,  -2.759285104469687e+02,
                             1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                             6.680131188771972e+01, -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                             -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                             3.754408661907416e+00};
  if (p <= 0) return -INFINITY;
  if (p >= 1) return INFINITY;
  if (p < 0.02425) {
    const double q = std::sqrt(-2 * std::log(p));
    return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
           ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  if (p > 1 - 0.02425) return -NormalQuantile(1 - p);
  const double q = p - 0.5, r = q * q;
  return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
         (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

double Distance(std::span<const float> a, std::span<const float> b) {
  double sum = 0.0;
  for (size_t j = 0; j < a.size(); ++j) {
    const double d = static_cast<double>(a[j]) - b[j];
    sum += d * d;
  }
  return std::sqrt(sum);
}

// Min-max: the largest gamma (to a relative 1e-5) for which mean + gamma x p stays within
// `bound` of every honest update: doubling from 10, then bisection.
void MinMax(const HonestStats& honest, std::span<float> x) {
  const size_t p = x.size();
  std::vector<float> mean(p), direction(p), crafted(p);
  for (size_t j = 0; j < p; ++j) {
    mean[j] = static_cast<float>(honest.Mean(j));
    direction[j] = static_cast<float>(-honest.Std(j));
  }
  const double bound = honest.MaxPairwiseDistance();
  auto craft = [&](double gamma) {
    for (size_t j = 0; j < p; ++j) crafted[j] = static_cast<float>(mean[j] + gamma * direction[j]);
  };
  auto within = [&] {
    for (const std::vector<float>& u : honest.updates()) {
      if (Distance(crafted, u) > bound) return false;
    }
    return true;
  };
  // gamma = 0 (the mean) is always within: the mean lies in the honest updates' convex hull.
  double lo = 0.0, hi = 10.0;
  for (craft(hi); within() && hi < 1e6; craft(hi)) {
    lo = hi;
    hi *= 2;
  }
  while (hi - lo > 1e-5 * std::max(1.0, lo)) {
    const double mid = (lo + hi) / 2;
    craft(mid);
    (within() ? lo : hi) = mid;
  }
  craft(lo);
  std::copy(crafted.begin(), crafted.end(), x.begin());
}

}  // namespace

namespace {

// One line per attack; its parameters are read in ParseAttackSpec.
constexpr struct {
  const char* name;
  AttackKind kind;
} kAttacks[] = {{"none", AttackKind::kNone},         {"signflip", AttackKind::kSignFlip},
                {"gaussian", AttackKind::kGaussian}, {"labelflip", AttackKind::kLabelFlip},
                {"ipm", AttackKind::kIpm},           {"alie", AttackKind::kAlie},
                {"minmax", AttackKind::kMinMax}};

}  // namespace

std::vector<std::string> AttackNames() {
  std::vector<std::string> names;
  for (const auto& a : kAttacks) names.emplace_back(a.name);
  return names;
}

Result<AttackSpec> ParseAttackSpec(const std::string& text) {
  auto parsed = StrategySpec::Parse(text);
  if (!parsed.ok()) return InvalidArgumentError("--attack: " + parsed.status().message());
  StrategySpec spec = std::move(parsed).value();
  const std::string& name = spec.name();
  AttackSpec a;
  const auto* entry =
      std::find_if(std::begin(kAttacks), std::end(kAttacks), [&](const auto& e) { return name == e.name; });
  if (entry == std::end(kAttacks)) {
    std::string known;
    for (const std::string& n : AttackNames()) known += (known.empty() ? "" : ", ") + n;
    return InvalidArgumentError("unknown attack '" + name + "' (known: " + known + "; ipm takes eps=E, alie z=Z)");
  }
  a.kind = entry->kind;
  if (a.kind == AttackKind::kIpm) {
    PLEXUS_ASSIGN_OR_RETURN(a.ipm_epsilon, spec.GetDouble("eps", 0.5));
    if (!(a.ipm_epsilon > 0) || !std::isfinite(a.ipm_epsilon))
      return InvalidArgumentError("--attack: ipm:eps must be positive");
  } else if (a.kind == AttackKind::kAlie) {
    PLEXUS_ASSIGN_OR_RETURN(a.alie_z, spec.GetDouble("z", -1.0));
    if (!std::isfinite(a.alie_z)) return InvalidArgumentError("--attack: alie:z must be finite");
  }
  if (Status s = spec.CheckAllUsed(); !s.ok()) return InvalidArgumentError("--attack: " + s.message());
  return a;
}

Result<AttackKind> ParseAttack(const std::string& text) {
  PLEXUS_ASSIGN_OR_RETURN(AttackSpec a, ParseAttackSpec(text));
  return a.kind;
}

void HonestStats::Add(std::span<const float> delta) {
  if (sum_.empty()) {
    sum_.assign(delta.size(), 0.0);
    sum_squares_.assign(delta.size(), 0.0);
  }
  for (size_t j = 0; j < delta.size(); ++j) {
    sum_[j] += delta[j];
    sum_squares_[j] += static_cast<double>(delta[j]) * delta[j];
  }
  ++count_;
  if (keep_updates_) updates_.emplace_back(delta.begin(), delta.end());
}

double HonestStats::MaxPairwiseDistance() const {
  if (distance_count_ != updates_.size()) {
    max_distance_ = 0.0;
    for (size_t a = 0; a < updates_.size(); ++a) {
      for (size_t b = a + 1; b < updates_.size(); ++b) {
        max_distance_ = std::max(max_distance_, Distance(updates_[a], updates_[b]));
      }
    }
    distance_count_ = updates_.size();
  }
  return max_distance_;
}

double HonestStats::Std(size_t j) const {
  const double mean = Mean(j);
  return std::sqrt(std::max(0.0, sum_squares_[j] / static_cast<double>(count_) - mean * mean));
}

double AlieZ(size_t n, size_t f) {
  const auto s = static_cast<double>(n / 2 + 1) - static_cast<double>(f);
  const double p = (static_cast<double>(n) - s) / static_cast<double>(n);
  return std::max(0.0, NormalQuantile(p));
}

void ApplyAttack(const AttackSpec& spec, const HonestStats& honest, double alie_z, Rng& rng, ModelState& delta) {
  const AttackKind kind = spec.kind;
  if (spec.alie_z >= 0) alie_z = spec.alie_z;
  std::span<float> x = delta.data();
  const bool informed = honest.count() > 0;
  switch (kind) {
    case AttackKind::kNone:
    case AttackKind::kLabelFlip:  // the poison was in the training data
      return;
    case AttackKind::kGaussian:
      for (float& v : x) v = static_cast<float>(rng.Normal());
      return;
    case AttackKind::kIpm:
      if (informed) {
        for (size_t j = 0; j < x.size(); ++j) x[j] = static_cast<float>(-spec.ipm_epsilon * honest.Mean(j));
        return;
      }
      break;
    case AttackKind::kAlie:
      if (informed) {
        for (size_t j = 0; j < x.size(); ++j) x[j] = static_cast<float>(honest.Mean(j) - alie_z * honest.Std(j));
        return;
      }
      break;
    case AttackKind::kMinMax:
      if (honest.updates().size() >= 2) return MinMax(honest, x);
      break;
    case AttackKind::kSignFlip:
      break;
  }
  for (float& v : x) v = -10.0f * v;
}

std::vector<bool> ChooseAttackers(AttackKind kind, double fraction, size_t n, uint64_t seed) {
  std::vector<bool> malicious(n, false);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  Rng pick = Rng::Derive(seed, 0xbadc0deULL);
  pick.Shuffle(std::span<size_t>(order));
  const auto count =
      kind == AttackKind::kNone ? 0 : static_cast<size_t>(std::llround(fraction * static_cast<double>(n)));
  for (size_t i = 0; i < count; ++i) malicious[order[i]] = true;
  return malicious;
}

}  // namespace plexus
