#include "server/coordinator/backup_workers.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

namespace plexus {

Result<BackupWorkers> BackupWorkers::Parse(const std::string& spec) {
  BackupWorkers w;
  if (spec == "none") return w;
  if (spec == "dynamic") {
    w.kind_ = Kind::kDynamic;
    return w;
  }
  if (spec.rfind("static:b=", 0) == 0) {
    const std::string number = spec.substr(9);
    char* end = nullptr;
    errno = 0;
    const long long b = std::strtoll(number.c_str(), &end, 10);
    if (!number.empty() && *end == '\0' && errno == 0 && b >= 0) {
      w.kind_ = Kind::kStatic;
      w.backups_ = static_cast<size_t>(b);
      return w;
    }
  }
  return InvalidArgumentError("backup workers '" + spec + "': expected none, static:b=<count> or dynamic");
}

size_t BackupWorkers::UpdatesToWaitFor(const std::vector<std::string>& selected, size_t floor) const {
  const size_t n = selected.size();
  floor = std::min(std::max<size_t>(floor, 1), n);
  switch (kind_) {
    case Kind::kNone:
      return n;
    case Kind::kStatic:
      return std::max(floor, n > backups_ ? n - backups_ : 0);
    case Kind::kDynamic:
      break;
  }
  if (!noise_ratio_) return n;
  std::vector<double> durations;
  for (const std::string& id : selected) {
    auto it = duration_ms_.find(id);
    if (it == duration_ms_.end()) return n;  // someone never measured: wait for everyone
    durations.push_back(std::max(it->second, 1.0));
  }
  std::sort(durations.begin(), durations.end());
  size_t best = n;
  double best_rate = -1.0;
  for (size_t k = floor; k <= n; ++k) {
    const double gain = static_cast<double>(k) / (static_cast<double>(k) + *noise_ratio_);
    const double rate = gain / durations[k - 1];
    if (rate >= best_rate) {  // ties go to the larger k: less noise for the same time
      best_rate = rate;
      best = k;
    }
  }
  return best;
}

void BackupWorkers::ObserveDuration(const std::string& client, int64_t duration_ms) {
  const auto d = static_cast<double>(duration_ms);
  auto [it, fresh] = duration_ms_.emplace(client, d);
  if (!fresh) it->second = 0.5 * it->second + 0.5 * d;
}

void BackupWorkers::ObserveCancelled(const std::string& client, int64_t waited_ms) {
  const auto d = static_cast<double>(waited_ms);
  auto [it, fresh] = duration_ms_.emplace(client, d);
  if (!fresh) it->second = std::max(it->second, d);
}

void BackupWorkers::ObserveRound(double mean_update_sq_norm, double step_sq_norm) {
  if (!(step_sq_norm > 0)) return;  // no step: nothing to learn the ratio from
  noise_ratio_ = std::max(0.0, mean_update_sq_norm - step_sq_norm) / step_sq_norm;
}

std::string BackupWorkers::Describe() const {
  switch (kind_) {
    case Kind::kNone:
      return "none";
    case Kind::kStatic:
      return "static:b=" + std::to_string(backups_);
    case Kind::kDynamic:
      break;
  }
  return "dynamic";
}

}  // namespace plexus
