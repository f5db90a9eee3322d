// DeviceModel: the virtual devices of a simulated federation (compute speed, network, dropouts,
// availability), and what one task costs on them. A value type; thread-safe.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/status.h"

namespace plexus {

// Virtual devices. Compute: each client's time per local step is either spread geometrically
// from ms_per_step (the fastest) to ms_per_step x speed_ratio (the slowest), assigned in a seeded
// order, or, when speed_sigma > 0, log-normal: ms_per_step x exp(speed_sigma x Z), so ms_per_step
// is the median. Network: every transfer pays latency_ms, the model download num_params x 4 bytes
// at down_mbps and the update upload the same at up_mbps (0 = instantaneous), plus a fixed
// task_overhead_ms per task; with bandwidth_sigma > 0 each client's bandwidths (both ways) are
// scaled by its own log-normal factor exp(bandwidth_sigma x Z), median 1. Reliability: a task is abandoned with
// probability `dropout` (the client goes silent for as long as the task would have taken); with mean_on_s and
// mean_off_s set, each client alternates between exponential on and off periods with those means, polls only while on,
// and loses a task whose on period ends before the task does.
struct DeviceModel {
  double ms_per_step = 10.0;
  double speed_ratio = 1.0;       // slowest / fastest (geometric spread)
  double speed_sigma = 0.0;       // log-normal spread; replaces speed_ratio when > 0
  int64_t task_overhead_ms = 50;  // per task
  double latency_ms = 0.0;        // per transfer (one download, one upload per task)
  double down_mbps = 0.0;         // megabits per second; 0 = transfers take no time
  double up_mbps = 0.0;
  double bandwidth_sigma = 0.0;  // log-normal spread of the clients' bandwidths; 0 = all alike
  double dropout = 0.0;          // probability that a task is abandoned, in [0, 1)
  double mean_on_s = 0.0;        // availability periods; both 0 = always available
  double mean_off_s = 0.0;

  // Named profiles (docs/simulation.md has the table): uniform, heterogeneous, mobile.
  // InvalidArgument for another name.
  static Result<DeviceModel> Profile(const std::string& name);
  // InvalidArgument naming the bad field.
  Status Validate() const;
  // Time per local step of each of n clients.
  std::vector<double> Assign(size_t n, uint64_t seed) const;
  // Client i's bandwidth factor: exp(bandwidth_sigma x Z) from a seeded draw (1 when sigma is 0).
  double BandwidthFactor(size_t i, uint64_t seed) const;
  // Virtual milliseconds of one task: download, `steps` local steps at `ms_per_step`, upload, at
  // the bandwidths times `bandwidth_factor`.
  double TaskMs(int64_t steps, double ms_per_step, size_t model_bytes, double bandwidth_factor = 1.0) const;
};

// Each client's alternating on/off process (DeviceModel::mean_on_s, mean_off_s), advanced lazily: exponential periods
// drawn from the client's own seeded stream, so the schedule does not depend on what else happens.
class DeviceAvailability {
 public:
  DeviceAvailability(const DeviceModel& d, size_t n, uint64_t seed)
      : on_ms_(d.mean_on_s * 1000.0), off_ms_(d.mean_off_s * 1000.0), seed_(seed) {
    if (on_ms_ <= 0) return;
    clients_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      State& c = clients_[i];
      c.on = Draw(i, c).Uniform() < on_ms_ / (on_ms_ + off_ms_);  // the stationary share
      c.next_switch_ms = Period(i, c);                            // memoryless: the residual period has the same law
    }
  }
  bool always_on() const { return clients_.empty(); }
  // Whether client i is on at `now`; `until` receives when that ends.
  bool On(size_t i, int64_t now, int64_t* until) {
    State& c = clients_[i];
    while (c.next_switch_ms <= now) {
      c.on = !c.on;
      c.next_switch_ms += Period(i, c);
    }
    *until = c.next_switch_ms;
    return c.on;
  }

 private:
  struct State {
    int64_t next_switch_ms = 0;
    uint32_t draws = 0;
    bool on = true;
  };
  Rng Draw(size_t i, State& c) const { return Rng::Derive(seed_ ^ 0xa7a11ULL, i * 1000003ULL + c.draws++); }
  int64_t Period(size_t i, State& c) const {
    const double mean = c.on ? on_ms_ : off_ms_;
    return std::max<int64_t>(1, std::llround(-mean * std::log1p(-Draw(i, c).Uniform())));
  }

  const double on_ms_, off_ms_;
  const uint64_t seed_;
  std::vector<State> clients_;
};

}  // namespace plexus
