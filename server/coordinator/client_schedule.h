// ClientSchedule: what the semi-asynchronous scheduler knows about one client, as reported by
// the admin status call. A plain value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace plexus {

struct ClientSchedule {
  std::string client_id;
  std::optional<double> ms_per_step;  // speed estimate, once the client has reported a task
  int64_t local_steps = 0;            // of its current or last task
  uint64_t group = 0;                 // group of its current task while that group is open; 0 for none
};

}  // namespace plexus
