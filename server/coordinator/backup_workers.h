// BackupWorkers: how many of a synchronous round's selected clients the round waits for; the
// slowest others are "backup workers" whose updates are not waited for (Chen et al. 2016), a
// number chosen afresh every round in the dynamic policy (DBW, Xu, Neglia, Sebastianelli 2020).
//
//   none        wait for every selected client (up to the round's K)
//   static:b=B  wait for the fastest n - B of the n selected
//   dynamic     wait for the k that maximises gain(k) / time(k), where time(k) is the k-th smallest
//               of the selected clients' estimated task durations (an average of their past
//               durations; a client whose update was not waited for counts as at least as slow as
//               the round's length), and gain(k) = k / (k + r), the share of signal in the mean of
//               k updates, with r = S / G the noise ratio of the last round: G the squared norm of
//               the model step, S the mean squared distance of the updates from their mean.
//               Until durations and r are known it waits for everyone.
//
// The paper's estimator of expected loss decrease, eta |grad F|^2 - (L eta^2 / 2)(|grad F|^2 +
// sigma^2 / (k B)), needs L and eta; gain(k) above keeps its dependence on k (more updates, less
// noise, with diminishing returns) without them. Thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace plexus {

class BackupWorkers {
 public:
  // InvalidArgument naming the spec for anything but the forms above.
  static Result<BackupWorkers> Parse(const std::string& spec);

  // How many updates a round with these selected clients waits for, never below `floor` or
  // above selected.size().
  size_t UpdatesToWaitFor(const std::vector<std::string>& selected, size_t floor) const;

  // A task took `duration_ms` from its hand-out to its update.
  void ObserveDuration(const std::string& client, int64_t duration_ms);
  // A task was not waited for after `waited_ms`: its duration is at least that.
  void ObserveCancelled(const std::string& client, int64_t waited_ms);
  // The last round's mean squared norm of the updates, and the squared norm of its model step.
  void ObserveRound(double mean_update_sq_norm, double step_sq_norm);

  bool dynamic() const { return kind_ == Kind::kDynamic; }
  std::string Describe() const;

 private:
  enum class Kind { kNone, kStatic, kDynamic };
  Kind kind_ = Kind::kNone;
  size_t backups_ = 0;                         // static
  std::map<std::string, double> duration_ms_;  // dynamic: per-client estimate
  std::optional<double> noise_ratio_;          // dynamic: r = S / G
};

}  // namespace plexus
