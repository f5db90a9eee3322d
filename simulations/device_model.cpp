#include "simulations/device_model.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/rng.h"

namespace plexus {

Result<DeviceModel> DeviceModel::Profile(const std::string& name) {
  if (name == "uniform") return DeviceModel{};
  if (name == "heterogeneous") {
    return DeviceModel{.ms_per_step = 25.0,
                       .speed_sigma = 0.8,
                       .task_overhead_ms = 20,
                       .latency_ms = 50.0,
                       .down_mbps = 50.0,
                       .up_mbps = 10.0,
                       .dropout = 0.05};
  }
  if (name == "mobile") {
    return DeviceModel{.ms_per_step = 60.0,
                       .speed_sigma = 1.0,
                       .task_overhead_ms = 50,
                       .latency_ms = 100.0,
                       .down_mbps = 10.0,
                       .up_mbps = 2.0,
                       .dropout = 0.1,
                       .mean_on_s = 600.0,
                       .mean_off_s = 300.0};
  }
  return InvalidArgumentError("unknown device profile '" + name + "' (known: uniform, heterogeneous, mobile)");
}

Status DeviceModel::Validate() const {
  if (!(dropout >= 0 && dropout < 1)) return InvalidArgumentError("dropout must lie in [0, 1)");
  if (!(ms_per_step > 0)) return InvalidArgumentError("ms-per-step must be positive");
  if (!(speed_ratio >= 1)) return InvalidArgumentError("speed-ratio must be at least 1");
  if (!(speed_sigma >= 0 && speed_sigma <= 5)) return InvalidArgumentError("speed-sigma must lie in [0, 5]");
  if (task_overhead_ms < 0) return InvalidArgumentError("task-overhead-ms must not be negative");
  if (!(latency_ms >= 0)) return InvalidArgumentError("latency-ms must not be negative");
  if (!(down_mbps >= 0) || !(up_mbps >= 0))
    return InvalidArgumentError("down-mbps and up-mbps must not be negative (0 = unlimited)");
  if (!(bandwidth_sigma >= 0 && bandwidth_sigma <= 5))
    return InvalidArgumentError("bandwidth-sigma must lie in [0, 5]");
  if (!(mean_on_s >= 0) || !(mean_off_s >= 0) || ((mean_on_s > 0) != (mean_off_s > 0))) {
    return InvalidArgumentError("mean-on-s and mean-off-s must both be positive (or both 0 for always available)");
  }
  return Status::Ok();
}

std::vector<double> DeviceModel::Assign(size_t n, uint64_t seed) const {
  std::vector<double> out(n);
  if (speed_sigma > 0) {
    for (size_t i = 0; i < n; ++i) {
      out[i] = ms_per_step * std::exp(speed_sigma * Rng::Derive(seed ^ 0x5beedULL, i).Normal());
    }
    return out;
  }
  std::vector<size_t> rank(n);
  std::iota(rank.begin(), rank.end(), size_t{0});
  Rng rng = Rng::Derive(seed, 0x5beedULL);
  rng.Shuffle(std::span<size_t>(rank));
  for (size_t i = 0; i < n; ++i) {
    const double position = n > 1 ? static_cast<double>(rank[i]) / static_cast<double>(n - 1) : 0.0;
    out[i] = ms_per_step * std::pow(speed_ratio, position);
  }
  return out;
}

double DeviceModel::BandwidthFactor(size_t i, uint64_t seed) const {
  return bandwidth_sigma > 0 ? std::exp(bandwidth_sigma * Rng::Derive(seed ^ 0xba4dULL, i).Normal()) : 1.0;
}

double DeviceModel::TaskMs(int64_t steps, double step_ms, size_t model_bytes, double bandwidth_factor) const {
  const double megabits = static_cast<double>(model_bytes) * 8.0 / 1e6;
  double ms = static_cast<double>(steps) * step_ms + static_cast<double>(task_overhead_ms) + 2.0 * latency_ms;
  if (down_mbps > 0) ms += megabits / (down_mbps * bandwidth_factor) * 1000.0;
  if (up_mbps > 0) ms += megabits / (up_mbps * bandwidth_factor) * 1000.0;
  return ms;
}

}  // namespace plexus
