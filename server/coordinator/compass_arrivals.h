// CompassArrivals: FedCompass's ArrivalPolicy (semi-asynchronous mode). A CompassScheduler gives
// each task a number of local steps so that clients of similar speed arrive together; arrivals
// are held per group, and a group (with any late arrivals from earlier groups) is folded and
// published when its last member arrives or its latest time passes (Tick). A client's first
// update, before its speed is known, is published on its own. Single-threaded.
#pragma once

#include <map>
#include <vector>

#include "server/coordinator/arrival_policy.h"
#include "server/coordinator/compass_scheduler.h"

namespace plexus {

class CompassArrivals final : public ArrivalPolicy {
 public:
  explicit CompassArrivals(const CompassOptions& options) : options_(options), scheduler_(options) {}

  Mode mode() const override { return Mode::kSemiAsync; }
  std::string Describe(const std::string& settings) const override;
  int64_t buffer_capacity() const override { return INT64_MAX; }  // groups decide when to publish
  bool needs_examples() const override { return true; }

  int64_t StepsFor(const std::string& client, int64_t, int64_t now_ms) override {
    return scheduler_.Assign(client, now_ms);
  }
  void Abandon(const std::string& client) override { scheduler_.Abandon(client); }
  Status Arrive(LoggedUpdate accepted, int64_t now_ms, VersionBuilder* builder) override;
  Status Restore(LoggedUpdate accepted, VersionBuilder* builder) override;
  Status RestoreDone(VersionBuilder* builder) override;
  Status Tick(int64_t now_ms, VersionBuilder* builder) override;
  void FoldAllHeld(VersionBuilder* builder) override;

  size_t held() const override;
  std::optional<double> SpeedOf(const std::string& client) const override { return scheduler_.SpeedOf(client); }
  std::vector<ClientSchedule> Schedule() const override { return scheduler_.Clients(); }

 private:
  // Folds the group's held updates and the late ones, then publishes.
  Status PublishGroup(uint64_t group, VersionBuilder* builder);

  const CompassOptions options_;
  CompassScheduler scheduler_;
  std::map<uint64_t, std::vector<LoggedUpdate>> held_;  // group -> updates that arrived on time
  std::vector<LoggedUpdate> late_;                      // arrived after their group closed
};

}  // namespace plexus
