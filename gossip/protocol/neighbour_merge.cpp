#include "gossip/protocol/neighbour_merge.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "aggregators/registry.h"
#include "aggregators/strategy_spec.h"

namespace plexus::gossip {
namespace {

double Distance(std::span<const float> a, std::span<const float> b) {
  double s = 0.0;
  for (size_t k = 0; k < a.size(); ++k) {
    const double d = static_cast<double>(a[k]) - b[k];
    s += d * d;
  }
  return std::sqrt(s);
}

double Norm(std::span<const float> a) {
  double s = 0.0;
  for (float v : a) s += static_cast<double>(v) * v;
  return std::sqrt(s);
}

class MeanMerge final : public NeighbourMerge {
 public:
  Result<ModelState> Merge(const ModelState& self, double self_weight, std::span<const WeightedModel> neighbours,
                           uint64_t, uint64_t) override {
    ModelState out = ModelState::UninitializedLike(self);
    out.set_version(self.version());
    std::span<float> o = out.data();
    std::span<const float> x = self.data();
    const auto sw = static_cast<float>(self_weight);
    // Block by block, so that each block of the result stays in cache while every neighbour is
    // added to it: one pass over memory instead of one per neighbour (same sums, same order).
    // The first neighbour is added in the pass that reads one's own model: a separate pass per
    // block restarted two streams every 16 KB and ran at half the rate (one neighbour, 4 MB:
    // 16 against 28-31 GB/s). Rounding as before: fl(fl(sw x) + fl(w y)), with no fused
    // multiply-add on any CPU (gossip/protocol/CMakeLists.txt).
    constexpr size_t kBlock = 4096;
    for (size_t begin = 0; begin < o.size(); begin += kBlock) {
      const size_t end = std::min(o.size(), begin + kBlock);
      if (neighbours.empty()) {
        for (size_t k = begin; k < end; ++k) o[k] = sw * x[k];
        continue;
      }
      std::span<const float> first = neighbours.front().model->data();
      const auto first_weight = static_cast<float>(neighbours.front().weight);
      for (size_t k = begin; k < end; ++k) o[k] = sw * x[k] + first_weight * first[k];
      for (const WeightedModel& n : neighbours.subspan(1)) {
        std::span<const float> y = n.model->data();
        const auto w = static_cast<float>(n.weight);
        for (size_t k = begin; k < end; ++k) o[k] += w * y[k];
      }
    }
    return out;
  }
  std::string Describe() const override { return "mean"; }
  bool linear() const override { return true; }
};

class ClippedMerge final : public NeighbourMerge {
 public:
  explicit ClippedMerge(double tau) : tau_(tau) {}
  Result<ModelState> Merge(const ModelState& self, double, std::span<const WeightedModel> neighbours, uint64_t,
                           uint64_t) override {
    ModelState out = self;
    if (neighbours.empty()) return out;
    std::vector<double> dist;
    for (const WeightedModel& n : neighbours) dist.push_back(Distance(n.model->data(), self.data()));
    double tau = tau_;
    if (tau <= 0) {  // adaptive: the (lower) median distance
      std::vector<double> sorted = dist;
      std::nth_element(sorted.begin(), sorted.begin() + (sorted.size() - 1) / 2, sorted.end());
      tau = sorted[(sorted.size() - 1) / 2];
    }
    std::span<float> o = out.data();
    std::span<const float> x = self.data();
    for (size_t j = 0; j < neighbours.size(); ++j) {
      const double scale = dist[j] > tau ? tau / dist[j] : 1.0;
      const auto f = static_cast<float>(neighbours[j].weight * scale);
      std::span<const float> y = neighbours[j].model->data();
      for (size_t k = 0; k < o.size(); ++k) o[k] += f * (y[k] - x[k]);
    }
    return out;
  }
  std::string Describe() const override {
    return tau_ > 0 ? "clipped(tau=" + std::to_string(tau_) + ")" : "clipped(tau=adaptive median)";
  }

 private:
  const double tau_;  // <= 0: adaptive
};

class BalanceMerge final : public NeighbourMerge {
 public:
  BalanceMerge(double gamma, double kappa, double alpha) : gamma_(gamma), kappa_(kappa), alpha_(alpha) {}
  Result<ModelState> Merge(const ModelState& self, double, std::span<const WeightedModel> neighbours, uint64_t round,
                           uint64_t total_rounds) override {
    const double progress = total_rounds > 0 ? static_cast<double>(round) / static_cast<double>(total_rounds) : 0.0;
    const double threshold = gamma_ * std::exp(-kappa_ * progress) * Norm(self.data());
    std::vector<const ModelState*> accepted;
    for (const WeightedModel& n : neighbours) {
      if (Distance(n.model->data(), self.data()) <= threshold) accepted.push_back(n.model);
    }
    ModelState out = self;
    if (accepted.empty()) return out;
    std::span<float> o = out.data();
    const auto keep = static_cast<float>(alpha_);
    const auto each = static_cast<float>((1.0 - alpha_) / static_cast<double>(accepted.size()));
    for (size_t k = 0; k < o.size(); ++k) o[k] *= keep;
    for (const ModelState* m : accepted) {
      std::span<const float> y = m->data();
      for (size_t k = 0; k < o.size(); ++k) o[k] += each * y[k];
    }
    return out;
  }
  std::string Describe() const override {
    return "balance(gamma=" + std::to_string(gamma_) + ",kappa=" + std::to_string(kappa_) +
           ",alpha=" + std::to_string(alpha_) + ")";
  }

 private:
  const double gamma_, kappa_, alpha_;
};

// A strategy of the aggregators registry over self plus neighbours, as deltas from self (so
// that translation-equivariant rules, all coordinate-wise ones among them, see the models).
class AggregatorMerge final : public NeighbourMerge {
 public:
  explicit AggregatorMerge(std::unique_ptr<Aggregator> agg) : agg_(std::move(agg)) {}
  Result<ModelState> Merge(const ModelState& self, double, std::span<const WeightedModel> neighbours, uint64_t,
                           uint64_t) override {
    std::vector<Update> updates(neighbours.size() + 1);
    updates[0].delta = ModelState::ZerosLike(self);
    for (size_t j = 0; j < neighbours.size(); ++j) {
      updates[j + 1].delta = *neighbours[j].model;
      updates[j + 1].delta.Subtract(self);
    }
    std::vector<const Update*> pointers;
    for (Update& u : updates) {
      u.num_examples = 1;
      pointers.push_back(&u);
    }
    if (pointers.size() < agg_->min_updates()) {
      return ModelState(self);  // too few neighbours this round for the rule: keep one's own
    }
    PLEXUS_ASSIGN_OR_RETURN(ModelState out, agg_->Aggregate(self, pointers));
    out.set_version(self.version());
    return out;
  }
  std::string Describe() const override { return agg_->Describe(); }

 private:
  std::unique_ptr<Aggregator> agg_;
};

Status MergeError(const std::string& what) { return InvalidArgumentError("--merge: " + what); }

}  // namespace

std::vector<std::string> MergeRuleNames() {
  std::vector<std::string> names{"mean", "clipped", "balance"};  // gossip's own, in MakeNeighbourMerge
  for (const std::string& s : StrategyNames()) names.push_back(s);
  return names;
}

Result<std::unique_ptr<NeighbourMerge>> MakeNeighbourMerge(std::string_view text) {
  auto parsed = StrategySpec::Parse(text);
  if (!parsed.ok()) return MergeError(parsed.status().message());
  StrategySpec spec = std::move(parsed).value();
  std::unique_ptr<NeighbourMerge> merge;
  auto get = [&](const char* key, double fallback) -> Result<double> {
    auto v = spec.GetDouble(key, fallback);
    if (!v.ok()) return MergeError(v.status().message());
    return *v;
  };
  if (spec.name() == "mean") {
    merge = std::make_unique<MeanMerge>();
  } else if (spec.name() == "clipped") {
    PLEXUS_ASSIGN_OR_RETURN(double tau, get("tau", 0.0));
    if (!(tau >= 0) || !std::isfinite(tau)) return MergeError("clipped:tau must be positive (omit it for adaptive)");
    merge = std::make_unique<ClippedMerge>(tau);
  } else if (spec.name() == "balance") {
    PLEXUS_ASSIGN_OR_RETURN(double gamma, get("gamma", 0.3));
    PLEXUS_ASSIGN_OR_RETURN(double kappa, get("kappa", 1.0));
    PLEXUS_ASSIGN_OR_RETURN(double alpha, get("alpha", 0.5));
    if (!(gamma > 0) || !(kappa >= 0) || !(alpha >= 0 && alpha < 1)) {
      return MergeError("balance needs gamma > 0, kappa >= 0 and 0 <= alpha < 1");
    }
    merge = std::make_unique<BalanceMerge>(gamma, kappa, alpha);
  } else {
    const std::vector<std::string> strategies = StrategyNames();
    if (std::find(strategies.begin(), strategies.end(), spec.name()) == strategies.end()) {
      std::string known;
      for (const std::string& n : MergeRuleNames()) known += (known.empty() ? "" : ", ") + n;
      return MergeError("unknown merge rule '" + spec.name() + "' (known: " + known +
                        ";) with settings such as clipped:tau=T, balance:gamma=G,kappa=K, trimmed_mean:beta=0.2");
    }
    auto agg = MakeAggregator(text, nullptr);
    if (!agg.ok()) return MergeError(agg.status().message());
    return std::unique_ptr<NeighbourMerge>(std::make_unique<AggregatorMerge>(std::move(agg).value()));
  }
  if (Status s = spec.CheckAllUsed(); !s.ok()) return MergeError(s.message());
  return merge;
}

}  // namespace plexus::gossip
