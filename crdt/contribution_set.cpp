#include "crdt/contribution_set.h"

#include <algorithm>

namespace plexus {
namespace {

std::string DotText(const Dot& d) { return d.replica + "/" + std::to_string(d.counter); }

}  // namespace

ContributionSet ContributionSet::FromState(std::string replica, std::map<Dot, std::string> adds,
                                           std::set<Dot> tombstones) {
  ContributionSet s(std::move(replica));
  s.adds_ = std::move(adds);
  s.tombstones_ = std::move(tombstones);
  for (const auto& [dot, id] : s.adds_) {
    if (dot.replica == s.replica_) s.counter_ = std::max(s.counter_, dot.counter);
  }
  for (const Dot& dot : s.tombstones_) {
    if (dot.replica == s.replica_) s.counter_ = std::max(s.counter_, dot.counter);
  }
  return s;
}

Dot ContributionSet::Add(const std::string& id) {
  Dot d{replica_, ++counter_};
  adds_.emplace(d, id);
  return d;
}

size_t ContributionSet::Remove(const std::string& id) {
  size_t n = 0;
  for (const auto& [dot, added] : adds_) {
    if (added == id && tombstones_.insert(dot).second) ++n;
  }
  return n;
}

bool ContributionSet::Contains(const std::string& id) const {
  for (const auto& [dot, added] : adds_) {
    if (added == id && !tombstones_.count(dot)) return true;
  }
  return false;
}

std::vector<std::string> ContributionSet::Live() const {
  std::vector<std::string> out;
  for (const auto& [dot, id] : adds_) {
    if (!tombstones_.count(dot)) out.push_back(id);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void ContributionSet::Join(const ContributionSet& other) {
  for (const auto& [dot, id] : other.adds_) {
    adds_.emplace(dot, id);
    if (dot.replica == replica_) counter_ = std::max(counter_, dot.counter);
  }
  for (const Dot& dot : other.tombstones_) {
    tombstones_.insert(dot);
    if (dot.replica == replica_) counter_ = std::max(counter_, dot.counter);
  }
}

std::vector<std::string> ContributionSet::Entries() const {
  std::vector<std::string> out;
  for (const auto& [dot, id] : adds_) out.push_back("+" + DotText(dot) + "/" + id);
  for (const Dot& dot : tombstones_) out.push_back("-" + DotText(dot));
  return out;
}

ContributionSet ContributionSet::Select(const std::set<std::string>& entries) const {
  ContributionSet out(replica_);
  for (const auto& [dot, id] : adds_) {
    if (entries.count("+" + DotText(dot) + "/" + id)) out.adds_.emplace(dot, id);
  }
  for (const Dot& dot : tombstones_) {
    if (entries.count("-" + DotText(dot))) out.tombstones_.insert(dot);
  }
  return out;
}

}  // namespace plexus
