// SecureBuffers: FedBuff's buffers as secure aggregation groups (`plexus server --mode async
// --secagg`). Clients that poll for a task join the group being formed; once it holds
// buffer-size + spare clients (or at least 3 have waited a stage's time), it starts as one
// SecureRound and each member gets its task on the model of that moment. The members train at
// their own pace and send their masked updates whenever they finish, in any order; the masks
// cancel within the group, so arrival order does not matter. A group that completes yields its
// weighted mean as one update of its base version, which AsyncEngine folds as FedBuff folds a
// buffer: one version per group, weighted by the staleness of the group's base (every member
// shares it, so the server applies s(tau) to the group's mean, which equals the members applying
// it to their own updates). A group that aborts yields nothing and its members poll again.
// Several groups may be open at once: a group forms while earlier ones train.
//
// What the server learns: each group's weighted mean and total weight, who was in each group and
// when each stage's messages arrived; never one client's update (docs/privacy.md).
// Borrows the pool. Thread-compatible (the engine's caller serializes calls).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/model_state.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "core/update.h"
#include "privacy/secagg_exchange.h"
#include "server/coordinator/secure_round.h"

namespace plexus {

class SecureBuffers {
 public:
  // `input_stage_ms`: how long members may train before the group goes on without them.
  // `opening`: this process's opening of the store (group bindings stay unique across restarts).
  SecureBuffers(SecAggSettings settings, int64_t buffer_size, int64_t input_stage_ms, uint64_t opening,
                ThreadPool* pool);

  struct Assignment {
    std::string task_id;
    uint64_t base_version = 0;
    int64_t issued_ms = 0;
  };
  // The client's task, or nullopt (it waits). A client not in a group joins the one forming,
  // which starts once full, or with at least 3 members once its first has waited a stage's time;
  // `connected` (the clients seen lately) decides who is still there to be taken. A member's task
  // is handed out until it has advertised its keys: later it could not join any more.
  Result<std::optional<Assignment>> Poll(const std::string& client_id, const std::vector<std::string>& connected,
                                         const ModelState& model, int64_t now_ms);
  // A member's call about its task: NotFound for a task in no open group (a member of a group
  // that has ended may still ask how it ended); PermissionDenied for another client's task.
  Result<secagg::View> Exchange(const std::string& client_id, const std::string& task_id, const secagg::Call& call,
                                int64_t now_ms);
  // The stages' deadlines.
  void Tick(int64_t now_ms);
  // The client leaves: it is no longer formed into a group (an open group goes on without it).
  void Forget(const std::string& client_id);

  struct Ended {
    uint64_t group = 0;
    uint64_t base_version = 0;
    Result<Update> mean = InternalError("not done");            // of the group's base version; an error if aborted
    std::vector<std::pair<std::string, std::string>> included;  // (client, task) whose updates are in it
  };
  // The groups that ended since the last call, in the order they ended. `layout`: the model's.
  std::vector<Ended> TakeEnded(const ModelState& layout);

  int64_t group_size() const { return group_size_; }
  size_t open_groups() const { return groups_.size(); }
  uint64_t groups_started() const { return next_group_; }
  size_t members() const;  // in open groups, and waiting in the forming one
  // Whether `client` is one of those.
  bool Knows(const std::string& client) const { return task_of_client_.count(client) || forming_.count(client); }
  int64_t aborted() const { return aborted_; }
  const std::string& last_abort() const { return last_abort_; }
  // The stage of the oldest open group ("" when none).
  std::string stage() const;
  double last_unmask_ms() const { return last_unmask_ms_; }

 private:
  struct Group {
    uint64_t base_version = 0;
    std::shared_ptr<SecureRound> round;
    std::map<std::string, std::string> task_of_client, client_of_task;
  };
  Status StartGroup(const ModelState& model, int64_t now_ms);
  // Moves the groups that finished (done or aborted) out of the open ones.
  void CollectEnded();

  const SecAggSettings settings_;
  const int64_t group_size_;
  const int64_t input_stage_ms_;
  const uint64_t opening_;
  ThreadPool* const pool_;
  std::map<std::string, int64_t> forming_;  // client -> when it first waited
  std::map<uint64_t, Group> groups_;        // open, by number
  std::map<std::string, uint64_t> group_of_task_;
  std::map<std::string, std::string> task_of_client_;
  // Ended groups members may still query (the last few).
  std::deque<std::pair<uint64_t, Group>> ended_;
  std::vector<uint64_t> newly_ended_;  // not yet taken by TakeEnded
  uint64_t next_group_ = 0;
  int64_t aborted_ = 0;
  std::string last_abort_;
  double last_unmask_ms_ = 0;
};

}  // namespace plexus
