#include "server/coordinator/compass_arrivals.h"

#include <string>

namespace plexus {

std::string CompassArrivals::Describe(const std::string& settings) const {
  return "fedcompass(q=" + std::to_string(options_.q_min) + ".." + std::to_string(options_.q_max) +
         ",lambda=" + std::to_string(options_.latest_time_factor) + "," + settings + ")";
}

Status CompassArrivals::Arrive(LoggedUpdate accepted, int64_t now_ms, VersionBuilder* builder) {
  const CompassScheduler::ArrivalResult arrival = scheduler_.Arrive(accepted.update.client_id, now_ms);
  switch (arrival.kind) {
    case CompassScheduler::Arrival::kUngrouped:
      PLEXUS_RETURN_IF_ERROR(builder->Fold(std::move(accepted), 0));
      return builder->Publish();
    case CompassScheduler::Arrival::kLate:
      late_.push_back(std::move(accepted));
      return Status::Ok();
    case CompassScheduler::Arrival::kOnTime:
      held_[arrival.group].push_back(std::move(accepted));
      return arrival.group_complete ? PublishGroup(arrival.group, builder) : Status::Ok();
  }
  return Status::Ok();
}

Status CompassArrivals::Restore(LoggedUpdate accepted, VersionBuilder* builder) {
  // Groups did not survive the restart: the acknowledged updates make one version together. A
  // fold refused now is forgotten with the next commit and must not keep the server from starting.
  (void)builder->Fold(std::move(accepted), 0);
  return Status::Ok();
}

Status CompassArrivals::RestoreDone(VersionBuilder* builder) {
  return builder->folded() > 0 ? builder->Publish() : Status::Ok();
}

Status CompassArrivals::Tick(int64_t now_ms, VersionBuilder* builder) {
  for (uint64_t group : scheduler_.Overdue(now_ms)) {
    if (builder->finished()) break;
    PLEXUS_RETURN_IF_ERROR(PublishGroup(group, builder));
  }
  return Status::Ok();
}

void CompassArrivals::FoldAllHeld(VersionBuilder* builder) {
  for (auto& [group, held] : held_) {
    for (LoggedUpdate& u : held) (void)builder->Fold(std::move(u), group);
  }
  held_.clear();
  for (LoggedUpdate& u : late_) (void)builder->Fold(std::move(u), 0);
  late_.clear();
}

size_t CompassArrivals::held() const {
  size_t n = late_.size();
  for (const auto& [group, held] : held_) n += held.size();
  return n;
}

Status CompassArrivals::PublishGroup(uint64_t group, VersionBuilder* builder) {
  scheduler_.Close(group);
  std::vector<LoggedUpdate> updates = std::move(held_[group]);
  held_.erase(group);
  const size_t on_time = updates.size();
  for (LoggedUpdate& u : late_) updates.push_back(std::move(u));
  late_.clear();
  for (size_t i = 0; i < updates.size(); ++i) (void)builder->Fold(std::move(updates[i]), i < on_time ? group : 0);
  return builder->folded() > 0 ? builder->Publish() : Status::Ok();
}

}  // namespace plexus
