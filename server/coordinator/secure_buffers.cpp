#include "server/coordinator/secure_buffers.h"

#include <algorithm>
#include <set>
#include <utility>

#include "core/rng.h"

namespace plexus {
namespace {

constexpr size_t kEndedKept = 8;       // ended groups whose members may still ask how they ended
constexpr int64_t kSmallestGroup = 3;  // SecAgg+ needs three members

}  // namespace

SecureBuffers::SecureBuffers(SecAggSettings settings, int64_t buffer_size, int64_t input_stage_ms, uint64_t opening,
                             ThreadPool* pool)
    : settings_(std::move(settings)),
      group_size_(settings_.GroupSize(buffer_size)),
      input_stage_ms_(input_stage_ms),
      opening_(opening),
      pool_(pool) {}

size_t SecureBuffers::members() const { return task_of_client_.size() + forming_.size(); }

Result<std::optional<SecureBuffers::Assignment>> SecureBuffers::Poll(const std::string& client_id,
                                                                     const std::vector<std::string>& connected,
                                                                     const ModelState& model, int64_t now_ms) {
  if (!task_of_client_.count(client_id)) {
    forming_.emplace(client_id, now_ms);
    // Who is still there to be taken: a client gone quiet would only hold a group's first stage.
    const std::set<std::string> live(connected.begin(), connected.end());
    std::erase_if(forming_, [&](const auto& f) { return f.first != client_id && !live.count(f.first); });
    int64_t oldest = now_ms;
    for (const auto& [id, since] : forming_) oldest = std::min(oldest, since);
    const auto waiting = static_cast<int64_t>(forming_.size());
    if (waiting >= group_size_ || (waiting >= kSmallestGroup && now_ms - oldest >= settings_.StageMs())) {
      PLEXUS_RETURN_IF_ERROR(StartGroup(model, now_ms));
    }
  }
  auto it = task_of_client_.find(client_id);
  if (it == task_of_client_.end()) return std::optional<Assignment>();
  const Group& g = groups_.at(group_of_task_.at(it->second));
  if (!g.round->Joinable(client_id)) return std::optional<Assignment>();
  return std::optional<Assignment>(Assignment{it->second, g.base_version, now_ms});
}

Status SecureBuffers::StartGroup(const ModelState& model, int64_t now_ms) {
  // The first to wait go first; the rest wait for the next group.
  std::vector<std::pair<int64_t, std::string>> order;
  for (const auto& [id, since] : forming_) order.emplace_back(since, id);
  std::sort(order.begin(), order.end());
  order.resize(std::min(order.size(), static_cast<size_t>(group_size_)));
  std::vector<std::string> members;
  for (const auto& [since, id] : order) members.push_back(id);

  const uint64_t number = next_group_++;
  // Unique to this group of this opening of the store: messages of one group mean nothing in another.
  const uint64_t binding = (opening_ << 40) ^ (number + 1) ^ 0xa5c0000000000000ULL;
  PLEXUS_ASSIGN_OR_RETURN(std::unique_ptr<SecureRound> round,
                          SecureRound::Start(settings_, binding, Rng::Derive(0x5ec0a99ULL, binding).NextU64(), members,
                                             model, now_ms, input_stage_ms_, pool_));
  Group g;
  g.base_version = model.version();
  g.round = std::move(round);
  for (const std::string& id : members) {
    const std::string task = "v" + std::to_string(model.version()) + "o" + std::to_string(opening_) + "g" +
                             std::to_string(number) + "-" + id;
    g.task_of_client[id] = task;
    g.client_of_task[task] = id;
    task_of_client_[id] = task;
    group_of_task_[task] = number;
    forming_.erase(id);
  }
  groups_.emplace(number, std::move(g));
  return Status::Ok();
}

Result<secagg::View> SecureBuffers::Exchange(const std::string& client_id, const std::string& task_id,
                                             const secagg::Call& call, int64_t now_ms) {
  auto at = group_of_task_.find(task_id);
  if (at == group_of_task_.end()) {
    // A member whose group has ended asks how it ended.
    for (const auto& [number, g] : ended_) {
      auto member = g.client_of_task.find(task_id);
      if (member != g.client_of_task.end() && member->second == client_id && call.kind == secagg::Call::Kind::kQuery) {
        return g.round->Exchange(client_id, call, now_ms);
      }
    }
    return NotFoundError("task '" + task_id +
                         "' is in no open secure group (it ended, was aborted, or was never this client's)");
  }
  Group& g = groups_.at(at->second);
  if (g.client_of_task.at(task_id) != client_id) {
    return PermissionDeniedError("task '" + task_id + "' belongs to another client, not '" + client_id + "'");
  }
  const std::shared_ptr<SecureRound> round = g.round;
  Result<secagg::View> view = round->Exchange(client_id, call, now_ms);
  CollectEnded();
  return view;
}

void SecureBuffers::Tick(int64_t now_ms) {
  for (auto& [number, g] : groups_) g.round->Tick(now_ms);
  CollectEnded();
}

void SecureBuffers::Forget(const std::string& client_id) { forming_.erase(client_id); }

void SecureBuffers::CollectEnded() {
  for (auto it = groups_.begin(); it != groups_.end();) {
    const auto stage = it->second.round->stage();
    if (stage != secagg::Server::Stage::kDone && stage != secagg::Server::Stage::kAborted) {
      ++it;
      continue;
    }
    for (const auto& [client, task] : it->second.task_of_client) {
      task_of_client_.erase(client);
      group_of_task_.erase(task);
    }
    newly_ended_.push_back(it->first);
    ended_.emplace_back(it->first, std::move(it->second));
    it = groups_.erase(it);
  }
  // Keep the groups not yet taken, and the last few for members' questions.
  while (ended_.size() > kEndedKept &&
         std::find(newly_ended_.begin(), newly_ended_.end(), ended_.front().first) == newly_ended_.end()) {
    ended_.pop_front();
  }
}

std::vector<SecureBuffers::Ended> SecureBuffers::TakeEnded(const ModelState& layout) {
  std::vector<Ended> out;
  for (uint64_t number : newly_ended_) {
    auto it = std::find_if(ended_.begin(), ended_.end(), [&](const auto& e) { return e.first == number; });
    const Group& g = it->second;
    Ended e;
    e.group = number;
    e.base_version = g.base_version;
    if (g.round->stage() == secagg::Server::Stage::kAborted) {
      ++aborted_;
      last_abort_ = g.round->abort_reason();
      e.mean = AbortedError("secure group " + std::to_string(number) + " aborted: " + last_abort_);
    } else {
      last_unmask_ms_ = g.round->unmask_ms();
      e.mean = g.round->GroupUpdate(layout, "g" + std::to_string(number) + "o" + std::to_string(opening_) + "-group");
      if (e.mean.ok()) {
        e.mean->base_version = g.base_version;
        for (const std::string& client : g.round->included())
          e.included.emplace_back(client, g.task_of_client.at(client));
      } else {
        ++aborted_;
        last_abort_ = e.mean.status().ToString();
      }
    }
    out.push_back(std::move(e));
  }
  newly_ended_.clear();
  return out;
}

std::string SecureBuffers::stage() const {
  if (groups_.empty()) return "";
  return secagg::StageName(groups_.begin()->second.round->stage());
}

}  // namespace plexus
