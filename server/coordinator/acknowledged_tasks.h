// AcknowledgedTasks: the task ids of the last updates an engine acknowledged, with their
// clients. A client whose acknowledgement was lost (the server crashed or the connection broke
// after the update was durable) sends the same update again; the engine finds its task here and
// acknowledges it again, instead of refusing it as a task it no longer knows or merging it twice.
// Bounded: past `capacity` the oldest are forgotten (a retry comes seconds after its loss).
// Correct only while task ids are never handed out twice, across restarts too.
// Thread-compatible.
#pragma once

#include <cstddef>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/round_record.h"

namespace plexus {

class AcknowledgedTasks {
 public:
  explicit AcknowledgedTasks(size_t capacity = 1 << 16) : capacity_(capacity) {}

  void Add(const std::string& client_id, const std::string& task_id) {
    if (!client_of_task_.emplace(task_id, client_id).second) return;
    order_.push_back(task_id);
    if (order_.size() > capacity_) {
      client_of_task_.erase(order_.front());
      order_.pop_front();
    }
  }

  // Adds the updates the last `versions` records merged: what an engine reopened after a crash
  // had acknowledged before it.
  void AddMerged(const std::vector<RoundRecord>& history, size_t versions = 8) {
    for (size_t i = history.size() > versions ? history.size() - versions : 0; i < history.size(); ++i) {
      for (const MergedUpdate& m : history[i].merged) Add(m.client_id, m.task_id);
    }
  }

  // Whether `client_id`'s update of `task_id` was acknowledged (another client's is not).
  bool Contains(const std::string& client_id, const std::string& task_id) const {
    auto it = client_of_task_.find(task_id);
    return it != client_of_task_.end() && it->second == client_id;
  }

 private:
  const size_t capacity_;
  std::deque<std::string> order_;  // oldest first
  std::unordered_map<std::string, std::string> client_of_task_;
};

}  // namespace plexus
