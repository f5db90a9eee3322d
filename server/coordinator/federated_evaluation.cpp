#include "server/coordinator/federated_evaluation.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "core/rng.h"

namespace plexus {
namespace {

constexpr const char* kTaskPrefix = "eval-v";

std::string TaskId(uint64_t version, const std::string& client_id) {
  return kTaskPrefix + std::to_string(version) + "-" + client_id;
}

}  // namespace

Status FederatedEvaluationOptions::Validate() const {
  if (every < 0) return InvalidArgumentError("the federated evaluation period must not be negative");
  if (!(fraction > 0 && fraction <= 1)) return InvalidArgumentError("the federated evaluation fraction lies in (0, 1]");
  if (deadline_ms <= 0) return InvalidArgumentError("the federated evaluation deadline must be positive");
  return Status::Ok();
}

bool FederatedEvaluation::Due(uint64_t version, bool is_final) const {
  return enabled() && version > 0 && (is_final || version % static_cast<uint64_t>(options_.every) == 0);
}

void FederatedEvaluation::Follow(const std::vector<RoundRecord>& history, bool finished,
                                 const std::function<std::vector<std::string>()>& known_clients, int64_t now_ms) {
  if (!enabled()) return;
  if (history_seen_ == history.size() && (!finished || final_told_)) return;
  const std::vector<std::string> known = known_clients();
  for (; history_seen_ < history.size(); ++history_seen_) {
    const RoundRecord& r = history[history_seen_];
    const bool is_final = finished && history_seen_ + 1 == history.size();
    OnPublished(r.model_version, r.model_sha256, is_final, known, now_ms);
    final_told_ |= is_final;
  }
  if (finished && !final_told_ && !history.empty()) {
    OnPublished(history.back().model_version, history.back().model_sha256, true, known, now_ms);
    final_told_ = true;
  }
}

bool FederatedEvaluation::Resume(const std::vector<RoundRecord>& history, bool finished,
                                 std::vector<std::string> known_clients, int64_t now_ms) {
  history_seen_ = history.size();
  if (!enabled() || history.empty()) return false;
  const RoundRecord& last = history.back();
  if (!Due(last.model_version, finished) || last.federated_accuracy) return false;
  OnPublished(last.model_version, last.model_sha256, finished, std::move(known_clients), now_ms);
  final_told_ = finished;
  return true;
}

void FederatedEvaluation::OnPublished(uint64_t version, const std::string& sha256, bool is_final,
                                      std::vector<std::string> known_clients, int64_t now_ms) {
  if (!enabled() || (seen_any_ && version <= last_seen_)) {
    if (enabled() && is_final && open_.count(version)) open_[version].is_final = true;
    return;
  }
  seen_any_ = true;
  last_seen_ = version;
  if (!Due(version, is_final)) return;
  Campaign c;
  c.sha256 = sha256;
  c.is_final = is_final;
  const auto known = static_cast<int64_t>(known_clients.size());
  c.wanted = std::min(
      known, std::max<int64_t>(1, static_cast<int64_t>(std::ceil(options_.fraction * static_cast<double>(known)))));
  std::sort(known_clients.begin(), known_clients.end());  // the sample depends on the seed, not the order given
  Rng rng = Rng::Derive(options_.seed, version);
  rng.Shuffle(std::span<std::string>(known_clients));
  c.chosen.insert(known_clients.begin(), known_clients.begin() + c.wanted);
  c.deadline_ms = now_ms + options_.deadline_ms;
  open_[version] = std::move(c);
}

std::optional<Task> FederatedEvaluation::TaskFor(const std::string& client_id, int64_t now_ms) {
  for (auto it = open_.rbegin(); it != open_.rend(); ++it) {
    Campaign& c = it->second;
    if (now_ms >= c.deadline_ms || !c.chosen.count(client_id) || c.asked.count(client_id)) continue;
    c.asked.insert(client_id);
    Task t;
    t.task_id = TaskId(it->first, client_id);
    t.model_version = it->first;
    t.model_sha256 = c.sha256;
    t.evaluate_only = true;
    t.deadline_ms = c.deadline_ms;
    return t;
  }
  return std::nullopt;
}

Status FederatedEvaluation::Report(const std::string& client_id, const std::string& task_id, const Evaluation& e) {
  for (auto& [version, c] : open_) {
    if (task_id != TaskId(version, client_id)) continue;
    if (!c.asked.count(client_id) || c.answered.count(client_id)) break;
    if (!std::isfinite(e.loss) || !std::isfinite(e.accuracy) || e.accuracy < 0 || e.accuracy > 1 || e.examples < 0 ||
        e.examples > (int64_t{1} << 40)) {
      return InvalidArgumentError("evaluation report of " + client_id +
                                  " is not a loss, an accuracy in [0, 1] and an example count");
    }
    c.answered.insert(client_id);
    if (e.examples > 0) {
      const auto n = static_cast<double>(e.examples);
      c.loss_sum += e.loss * n;
      c.correct_sum += e.accuracy * n;
      c.examples += e.examples;
      ++c.reporting_clients;
    }
    return Status::Ok();
  }
  return NotFoundError("no open evaluation task " + task_id + " for " + client_id);
}

std::vector<RoundRecord> FederatedEvaluation::Collect(int64_t now_ms) {
  std::vector<RoundRecord> out;
  for (auto it = open_.begin(); it != open_.end();) {
    const Campaign& c = it->second;
    const bool complete = static_cast<int64_t>(c.answered.size()) >= c.wanted;
    if (!complete && now_ms < c.deadline_ms) {
      ++it;
      continue;
    }
    if (c.examples > 0) {
      RoundRecord r;
      r.model_version = it->first;
      r.federated_accuracy = c.correct_sum / static_cast<double>(c.examples);
      r.federated_loss = c.loss_sum / static_cast<double>(c.examples);
      r.federated_examples = c.examples;
      r.federated_clients = c.reporting_clients;
      out.push_back(std::move(r));
    }
    it = open_.erase(it);
  }
  return out;
}

bool FederatedEvaluation::final_pending() const {
  for (const auto& [version, c] : open_) {
    if (c.is_final) return true;
  }
  return false;
}

bool FederatedEvaluation::Owes(const std::string& client_id) const {
  for (const auto& [version, c] : open_) {
    if (!c.is_final) continue;
    return c.chosen.count(client_id) && !c.answered.count(client_id);
  }
  return false;
}

}  // namespace plexus
