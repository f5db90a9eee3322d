// Attack: what the malicious clients of a simulation send instead of their honest update
// (`plexus sim --attack KIND --attackers FRACTION`). Attackers train like everyone else and then
// replace their delta:
//   signflip  -10 x delta (their own honest update, reversed and boosted, so that a fifth of the
//             clients outweighs the rest in a plain mean)
//   gaussian  values drawn from N(0, 1) per coordinate, independent of the data
//   labelflip the honest training run on poisoned data: label y reads as 9 - y (FlippedLabel);
//             the update is sent as trained
//   ipm[:eps=E]  -E x the mean of the honest updates on the same model version (E 0.5 by default; inner-product
//             manipulation, Xie, Koyejo, Gupta 2020; omniscient attacker)
//   alie[:z=Z] mean - z x std of the honest updates per coordinate, z given or chosen from the number of
//             clients per round and of attackers so the value still looks typical ("a little is
//             enough", Baruch, Baruch, Goldberg 2019; omniscient attacker)
//   minmax    mean + gamma x p with p = -std of the honest updates per coordinate and gamma the
//             largest value (doubling, then bisection) that keeps the crafted update's distance to every
//             honest update within the largest distance between two honest updates (Shejwalkar
//             and Houmansadr 2021, "min-max"; omniscient attacker)
// Stateless apart from the honest statistics the simulator feeds in. Thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/model_state.h"
#include "core/rng.h"
#include "core/status.h"

namespace plexus {

enum class AttackKind { kNone, kSignFlip, kGaussian, kLabelFlip, kIpm, kAlie, kMinMax };

// The label map of label-flipping attackers over the ten classes: y -> 9 - y.
inline constexpr uint8_t kFlippedLabels[10] = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0};

// An attack and its strength (`--attack ipm:eps=4`, `--attack alie:z=2`).
struct AttackSpec {
  AttackKind kind = AttackKind::kNone;
  double ipm_epsilon = 0.5;
  double alie_z = -1.0;  // negative: AlieZ of the clients per round and attackers
};

// The attacks' names, for --help and messages.
std::vector<std::string> AttackNames();
// InvalidArgument naming the kinds that exist, or the parameter that is wrong.
Result<AttackSpec> ParseAttackSpec(const std::string& text);
Result<AttackKind> ParseAttack(const std::string& text);

// Per-coordinate running statistics of the honest updates on one model version, and, when
// asked (min-max needs their distances), the updates themselves.
class HonestStats {
 public:
  explicit HonestStats(bool keep_updates = false) : keep_updates_(keep_updates) {}
  void Add(std::span<const float> delta);
  size_t count() const { return count_; }
  double Mean(size_t j) const { return sum_[j] / static_cast<double>(count_); }
  double Std(size_t j) const;
  // Empty unless kept.
  const std::vector<std::vector<float>>& updates() const { return updates_; }
  // The largest Euclidean distance between two kept updates (0 with fewer than two); computed
  // once per count.
  double MaxPairwiseDistance() const;

 private:
  bool keep_updates_;
  std::vector<double> sum_, sum_squares_;
  size_t count_ = 0;
  std::vector<std::vector<float>> updates_;
  mutable size_t distance_count_ = 0;  // the count max_distance_ was computed for
  mutable double max_distance_ = 0.0;
};

// Which of n clients (or nodes) are malicious: a seeded choice of round(fraction x n), none for
// kNone.
std::vector<bool> ChooseAttackers(AttackKind kind, double fraction, size_t n, uint64_t seed);

// ALIE's z for n clients per round of which f are malicious: the largest z such that the
// crafted value stays closer to the mean than at least n/2 + 1 - f honest values (Baruch et al.).
double AlieZ(size_t n, size_t f);

// Replaces `delta` (the attacker's honest update) by the attack. `honest` holds the honest
// updates on the same version so far (ipm and alie fall back to the sign flip without any,
// minmax with fewer than two kept).
// `alie_z` is used when the spec gives none.
void ApplyAttack(const AttackSpec& spec, const HonestStats& honest, double alie_z, Rng& rng, ModelState& delta);
inline void ApplyAttack(AttackKind kind, const HonestStats& honest, double alie_z, Rng& rng, ModelState& delta) {
  ApplyAttack(AttackSpec{kind}, honest, alie_z, rng, delta);
}

}  // namespace plexus
