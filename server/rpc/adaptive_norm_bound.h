// AdaptiveNormBound: the server's default defence against updates far larger than honest clients
// send (an upload of 3e38 values made every later version infinite). An update is refused when
// its L2 norm exceeds `factor` times the median norm of the last `window` accepted updates, or,
// before `min_samples` have been accepted, `factor` times the norm of the model it would change
// (no honest step moves a model by many times its own size). A factor of 0 turns it off.
// Thread-compatible (the server calls it under its lock).
#pragma once

#include <cstddef>
#include <deque>

namespace plexus {

class AdaptiveNormBound {
 public:
  explicit AdaptiveNormBound(double factor, size_t window = 100, size_t min_samples = 5)
      : factor_(factor), window_(window), min_samples_(min_samples) {}

  bool enabled() const { return factor_ > 0; }
  // The largest norm accepted now, given the norm of the current model; +infinity when off or
  // when there is nothing to go by yet (a zero model and no accepted update).
  double Bound(double model_norm) const;
  // Records the norm of an accepted update.
  void Accepted(double norm);

 private:
  const double factor_;
  const size_t window_;
  const size_t min_samples_;
  std::deque<double> recent_;  // the last `window_` accepted norms, oldest first
};

}  // namespace plexus
