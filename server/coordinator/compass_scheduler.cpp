#include "server/coordinator/compass_scheduler.h"

#include <algorithm>
#include <cmath>

namespace plexus {

Status CompassOptions::Validate() const {
  if (q_min < 1) return InvalidArgumentError("q-min must be at least 1");
  if (q_max < q_min) return InvalidArgumentError("q-max must be at least q-min");
  if (!(speed_momentum > 0.0 && speed_momentum <= 1.0))
    return InvalidArgumentError("speed-momentum must lie in (0, 1]");
  if (!(latest_time_factor >= 1.0)) return InvalidArgumentError("latest-time-factor must be at least 1");
  return Status::Ok();
}

int64_t CompassScheduler::Clamp(double q) const {
  const double lo = static_cast<double>(options_.q_min), hi = static_cast<double>(options_.q_max);
  return std::max<int64_t>(1, static_cast<int64_t>(std::clamp(q, lo, hi)));
}

int64_t CompassScheduler::Assign(const std::string& client, int64_t now_ms) {
  Abandon(client);  // a task re-issued without an arrival leaves its old group first
  ClientState& c = clients_[client];
  c.start_ms = now_ms;
  if (!c.ms_per_step) {
    c.local_steps = options_.q_max;
    return c.local_steps;
  }
  const double speed = std::max(*c.ms_per_step, 1e-3);
  const double now = static_cast<double>(now_ms);

  // Join the group that is still to arrive and lets this client run the most steps in range.
  std::optional<uint64_t> best_group;
  int64_t best_q = 0;
  for (const auto& [id, g] : groups_) {
    if (now >= g.expected_ms) continue;
    const auto q = static_cast<int64_t>(std::floor((g.expected_ms - now) / speed));
    if (q >= options_.q_min && q <= options_.q_max && q > best_q) {
      best_q = q;
      best_group = id;
    }
  }
  if (best_group) {
    Group& g = groups_[*best_group];
    g.members.insert(client);
    g.fastest_ms_per_step = std::min(g.fastest_ms_per_step, speed);
    c.group = best_group;
    c.local_steps = best_q;
    return c.local_steps;
  }

  // Open a group timed to arrive when an open group's fastest members would come back from
  // their next task, so that the two can merge later.
  double target_q = -1;
  for (const auto& [id, g] : groups_) {
    if (now >= g.latest_ms) continue;
    const double back = g.latest_ms + g.fastest_ms_per_step * static_cast<double>(options_.q_max);
    const double q = std::floor((back - now) / speed);
    if (q <= static_cast<double>(options_.q_max)) target_q = std::max(target_q, q);
  }
  c.local_steps = target_q < 0 ? options_.q_max : Clamp(target_q);
  const double duration = static_cast<double>(c.local_steps) * speed;
  const uint64_t id = next_group_++;
  Group& g = groups_[id];
  g.members.insert(client);
  g.fastest_ms_per_step = speed;
  g.expected_ms = now + duration;
  g.latest_ms = now + duration * options_.latest_time_factor;
  c.group = id;
  return c.local_steps;
}

CompassScheduler::ArrivalResult CompassScheduler::Arrive(const std::string& client, int64_t now_ms) {
  ClientState& c = clients_[client];
  const double observed =
      static_cast<double>(now_ms - c.start_ms) / static_cast<double>(std::max<int64_t>(1, c.local_steps));
  const double m = options_.speed_momentum;
  c.ms_per_step = c.ms_per_step ? (1.0 - m) * *c.ms_per_step + m * observed : observed;
  ArrivalResult r;
  if (!c.group) return r;  // kUngrouped
  const uint64_t id = *c.group;
  c.group.reset();
  auto it = groups_.find(id);
  if (it == groups_.end()) {
    r.kind = Arrival::kLate;
    return r;
  }
  Group& g = it->second;
  g.members.erase(client);
  if (static_cast<double>(now_ms) > g.latest_ms) {
    r.kind = Arrival::kLate;
    return r;
  }
  ++g.arrived;
  r.kind = Arrival::kOnTime;
  r.group = id;
  r.group_complete = g.members.empty();
  return r;
}

void CompassScheduler::Abandon(const std::string& client) {
  auto it = clients_.find(client);
  if (it == clients_.end()) return;
  ClientState& c = it->second;
  if (c.group) {
    if (auto g = groups_.find(*c.group); g != groups_.end()) g->second.members.erase(client);
    c.group.reset();
  }
}

std::vector<uint64_t> CompassScheduler::Overdue(int64_t now_ms) const {
  std::vector<uint64_t> out;
  for (const auto& [id, g] : groups_) {
    if (g.latest_ms <= static_cast<double>(now_ms) || g.members.empty()) out.push_back(id);
  }
  return out;
}

void CompassScheduler::Close(uint64_t group) { groups_.erase(group); }

std::vector<ClientSchedule> CompassScheduler::Clients() const {
  std::vector<ClientSchedule> out;
  for (const auto& [id, c] : clients_) {
    ClientSchedule v;
    v.client_id = id;
    v.ms_per_step = c.ms_per_step;
    v.local_steps = c.local_steps;
    if (c.group && groups_.count(*c.group)) v.group = *c.group;
    out.push_back(v);
  }
  return out;
}

std::optional<double> CompassScheduler::SpeedOf(const std::string& client) const {
  auto it = clients_.find(client);
  return it == clients_.end() ? std::nullopt : it->second.ms_per_step;
}

}  // namespace plexus
