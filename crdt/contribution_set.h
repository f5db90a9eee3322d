// ContributionSet: an add-wins observed-remove set (OR-Set; Shapiro et al., INRIA RR-7506, 2011)
// of contribution ids. Every Add carries a fresh dot (this replica's id and counter), never one
// derived from the content, so a re-add concurrent with a remove survives everywhere; Remove
// tombstones only the dots it has observed. Join is the union of adds and of tombstones:
// commutative, associative and idempotent, and nothing depends on arrival order or clocks.
// A value; thread-compatible.
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace plexus {

struct Dot {
  std::string replica;
  uint64_t counter = 0;
  auto operator<=>(const Dot&) const = default;
};

class ContributionSet {
 public:
  explicit ContributionSet(std::string replica) : replica_(std::move(replica)) {}
  // A state as saved: its adds and tombstones (see Join for how it merges into another).
  static ContributionSet FromState(std::string replica, std::map<Dot, std::string> adds, std::set<Dot> tombstones);

  // Adds `id` with a fresh dot.
  Dot Add(const std::string& id);
  // Tombstones every dot of `id` this state holds; returns how many.
  size_t Remove(const std::string& id);
  bool Contains(const std::string& id) const;
  // The live ids, sorted.
  std::vector<std::string> Live() const;
  void Join(const ContributionSet& other);

  // The state as canonical entries ("+replica/counter/id" for an add, "-replica/counter" for a
  // tombstone), for digests; and the sub-state made of the given entries (a delta to ship).
  std::vector<std::string> Entries() const;
  ContributionSet Select(const std::set<std::string>& entries) const;

  const std::map<Dot, std::string>& adds() const { return adds_; }
  const std::set<Dot>& tombstones() const { return tombstones_; }
  // Equal adds and tombstones (the replica's own id and counter aside).
  bool SameState(const ContributionSet& o) const { return adds_ == o.adds_ && tombstones_ == o.tombstones_; }

 private:
  std::string replica_;
  uint64_t counter_ = 0;  // highest of this replica's dots seen, so fresh dots stay fresh after joins
  std::map<Dot, std::string> adds_;
  std::set<Dot> tombstones_;
};

}  // namespace plexus
