// CompassScheduler: the computing-power-aware scheduling of FedCompass (Li et al., ICLR 2024;
// ../shared/design/algorithms.md section 3). It keeps an estimate of each client's time per
// local step and gives each new task a number of local steps Q in [q_min, q_max] chosen so that
// clients of similar speed arrive together as a group; a group is aggregated when its last
// member arrives or at its latest acceptable time (lambda x its expected duration), whichever
// comes first, so nobody waits for a straggler outside its group. The scheduler only decides;
// the engine holds the updates and aggregates.
//
// Pure logic over times the caller passes in (milliseconds of an injected Clock).
// Thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "server/coordinator/client_schedule.h"

namespace plexus {

struct CompassOptions {
  int64_t q_min = 20;               // fewest local steps a task gets
  int64_t q_max = 100;              // most local steps a task gets
  double speed_momentum = 0.9;      // weight of the newest observation in the speed estimate
  double latest_time_factor = 1.5;  // lambda: a group waits until lambda x its expected duration

  // InvalidArgument naming the first bad field.
  Status Validate() const;
};

class CompassScheduler {
 public:
  explicit CompassScheduler(const CompassOptions& options) : options_(options) {}

  // The local steps for `client`'s next task, which starts at now_ms, and the group it joins or
  // opens. A client whose speed is not known yet gets q_max and no group.
  int64_t Assign(const std::string& client, int64_t now_ms);

  enum class Arrival {
    kUngrouped,  // first task (no speed estimate then): aggregate on its own at once
    kOnTime,     // held for its group
    kLate,       // its group's latest time has passed or the group is closed: general buffer
  };
  struct ArrivalResult {
    Arrival kind = Arrival::kUngrouped;
    uint64_t group = 0;           // for kOnTime
    bool group_complete = false;  // kOnTime: every member of the group has now arrived
  };
  // Records the arrival of `client`'s task (updating its speed estimate) and says where its
  // update goes. REQUIRES: Assign was called for this client since its last arrival.
  ArrivalResult Arrive(const std::string& client, int64_t now_ms);

  // The client's task ended without an update (timed out or refused): it leaves its group.
  void Abandon(const std::string& client);

  // Open groups whose latest arrival time is at or before now_ms, or whose members all arrived
  // or left (Abandon: refused or timed out) so that nothing more can come on time; oldest first.
  std::vector<uint64_t> Overdue(int64_t now_ms) const;
  // The group was aggregated; members that have not arrived will count as late.
  void Close(uint64_t group);

  // Every client seen, by id.
  std::vector<ClientSchedule> Clients() const;
  // The client's speed estimate in ms per local step, once it has reported a task.
  std::optional<double> SpeedOf(const std::string& client) const;
  size_t open_groups() const { return groups_.size(); }

 private:
  struct ClientState {
    std::optional<double> ms_per_step;
    int64_t start_ms = 0;
    int64_t local_steps = 0;
    std::optional<uint64_t> group;
  };
  struct Group {
    std::set<std::string> members;  // assigned and not yet arrived
    size_t arrived = 0;
    double fastest_ms_per_step = 0;  // of everyone assigned to it
    double expected_ms = 0;
    double latest_ms = 0;
  };

  int64_t Clamp(double q) const;

  const CompassOptions options_;
  std::map<std::string, ClientState> clients_;
  std::map<uint64_t, Group> groups_;
  uint64_t next_group_ = 1;
};

}  // namespace plexus
