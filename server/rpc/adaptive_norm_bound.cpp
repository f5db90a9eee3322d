#include "server/rpc/adaptive_norm_bound.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace plexus {

double AdaptiveNormBound::Bound(double model_norm) const {
  constexpr double kNone = std::numeric_limits<double>::infinity();
  if (!enabled()) return kNone;
  const double by_model = model_norm > 0 && std::isfinite(model_norm) ? factor_ * model_norm : kNone;
  if (slots_.size() < min_clients_) return by_model;
  std::vector<double> norms;
  norms.reserve(slots_.size());
  for (const Slot& s : slots_) norms.push_back(s.norm);
  // The upper median: with as many small as large norms, the bound leans to the larger side,
  // so a minority of tiny updates can never decide it.
  const auto mid = norms.begin() + static_cast<std::ptrdiff_t>(norms.size() / 2);
  std::nth_element(norms.begin(), mid, norms.end());
  // Clients that did not move say nothing about the next update's size.
  return *mid > 0 ? factor_ * *mid : by_model;
}

void AdaptiveNormBound::Observe(const std::string& client_id, const std::string& task_id, double norm) {
  if (!enabled() || !std::isfinite(norm)) return;
  auto it = by_client_.find(client_id);
  if (it != by_client_.end()) {
    if (it->second->task_id == task_id) return;  // sent again: its norm is already counted
    slots_.erase(it->second);
    by_client_.erase(it);
  }
  slots_.push_front({client_id, task_id, norm});
  by_client_[client_id] = slots_.begin();
  if (slots_.size() > capacity_) {
    by_client_.erase(slots_.back().client_id);
    slots_.pop_back();
  }
}

}  // namespace plexus
