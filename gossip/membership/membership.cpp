#include "gossip/membership/membership.h"

#include <algorithm>

namespace plexus::gossip {

const char* MemberStateName(MemberState s) {
  switch (s) {
    case MemberState::kAlive:
      return "alive";
    case MemberState::kSuspect:
      return "suspect";
    case MemberState::kDead:
      return "dead";
    case MemberState::kLeft:
      return "left";
  }
  return "?";
}

namespace {

bool Live(MemberState s) { return s == MemberState::kAlive || s == MemberState::kSuspect; }

// SWIM's precedence: does `incoming` override what is known (`known`, `known_inc`)?
bool Overrides(MemberState incoming, uint64_t inc, MemberState known, uint64_t known_inc) {
  switch (incoming) {
    case MemberState::kAlive:
      return inc > known_inc;  // also how a dead or departed node comes back: a higher incarnation
    case MemberState::kSuspect:
      return Live(known) && (inc > known_inc || (inc == known_inc && known == MemberState::kAlive));
    case MemberState::kDead:
    case MemberState::kLeft:
      return Live(known) ? inc >= known_inc : inc > known_inc;
  }
  return false;
}

}  // namespace

Membership::Membership(NodeId self, std::string address, uint64_t incarnation, MembershipOptions options, uint64_t seed)
    : self_(self),
      address_(std::move(address)),
      incarnation_(incarnation),
      options_(options),
      rng_(Rng::Derive(seed, self)) {
  Gossip({self_, address_, incarnation_, MemberState::kAlive});
}

const std::string& Membership::address_of(NodeId node) const {
  static const std::string kNone;
  if (node == self_) return address_;
  auto it = members_.find(node);
  return it == members_.end() ? kNone : it->second.address;
}

void Membership::Gossip(const MemberUpdate& u) {
  // The newest word on a node replaces what was still queued about it.
  std::erase_if(pending_, [&](const Pending& p) { return p.update.node == u.node; });
  pending_.push_back({u, 0});
}

void Membership::Set(NodeId node, const std::string& address, uint64_t incarnation, MemberState state, double now_ms,
                     Changes* changes) {
  auto [it, inserted] = members_.try_emplace(node);
  Member& m = it->second;
  const bool was_live = !inserted && Live(m.state);
  if (!address.empty()) m.address = address;
  m.incarnation = incarnation;
  m.state = state;
  m.since_ms = now_ms;
  if (!was_live && Live(state)) changes->joined.push_back(node);
  if (was_live && !Live(state)) changes->left.push_back(node);
  Gossip({node, m.address, incarnation, state});
}

bool Membership::Apply(const MemberUpdate& u, double now_ms, Changes* changes) {
  if (u.incarnation >= kMaxIncarnation) return false;
  // About this node, below kMaxIncarnation - 1: its refutation (one more) stays below the limit.
  if (u.node == self_ && u.incarnation >= kMaxIncarnation - 1) return false;
  if (u.node == self_) {
    // Someone suspects this node (or buried it): refute with a higher incarnation.
    if (u.state != MemberState::kAlive && u.incarnation >= incarnation_) {
      ++counters_.refutations;
      incarnation_ = u.incarnation + 1;
      Gossip({self_, address_, incarnation_, MemberState::kAlive});
    }
    return true;
  }
  auto it = members_.find(u.node);
  if (it == members_.end()) {
    // A node first heard of as dead or departed is remembered as such (a later alive with a
    // higher incarnation brings it in).
    Set(u.node, u.address, u.incarnation, u.state, now_ms, changes);
    return true;
  }
  if (Overrides(u.state, u.incarnation, it->second.state, it->second.incarnation)) {
    Set(u.node, u.address, u.incarnation, u.state, now_ms, changes);
  }
  return true;
}

NodeId Membership::NextProbeTarget() {
  for (int pass = 0; pass < 2; ++pass) {
    while (next_in_order_ < order_.size()) {
      const NodeId n = order_[next_in_order_++];
      if (IsLive(n)) return n;
    }
    order_ = LiveMembers();
    rng_.Shuffle(std::span<NodeId>(order_));
    next_in_order_ = 0;
  }
  return self_;  // nobody to probe
}

void Membership::Tick(double now_ms, std::vector<Probe>* out, Changes* changes) {
  if (probing_) {
    const double waited = now_ms - probe_start_ms_;
    if (!indirect_sent_ && waited >= options_.ack_timeout_ms) {
      indirect_sent_ = true;
      std::vector<NodeId> helpers = LiveMembers();
      std::erase(helpers, probe_target_);
      rng_.Shuffle(std::span<NodeId>(helpers));
      if (helpers.size() > options_.indirect) helpers.resize(options_.indirect);
      for (NodeId h : helpers) out->push_back({Probe::Kind::kPingRequest, h, probe_target_, probe_seq_});
    }
    if (waited >= options_.period_ms) {
      probing_ = false;
      auto it = members_.find(probe_target_);
      if (it != members_.end() && it->second.state == MemberState::kAlive) {
        ++counters_.suspicions;
        Set(probe_target_, "", it->second.incarnation, MemberState::kSuspect, now_ms, changes);
      }
    }
  }
  for (auto& [node, m] : members_) {
    if (m.state == MemberState::kSuspect && now_ms - m.since_ms >= options_.suspicion_ms) {
      ++counters_.deaths;
      Set(node, "", m.incarnation, MemberState::kDead, now_ms, changes);
    }
  }
  std::erase_if(relays_, [&](const auto& r) { return now_ms - r.second.started_ms > options_.period_ms; });
  if (!probing_ && now_ms >= next_probe_ms_) {
    next_probe_ms_ = now_ms + options_.period_ms;
    ++periods_;
    if (options_.reconnect_periods > 0 && periods_ % options_.reconnect_periods == 0) ReconnectPing(out);
    const NodeId target = NextProbeTarget();
    if (target != self_) {
      probing_ = true;
      indirect_sent_ = false;
      probe_target_ = target;
      probe_seq_ = ++seq_;
      probe_start_ms_ = now_ms;
      out->push_back({Probe::Kind::kPing, target, target, probe_seq_});
    }
  }
}

void Membership::OnPing(NodeId from, NodeId target, uint64_t seq, double now_ms, std::vector<Probe>* out) {
  if (target == self_) {
    out->push_back({Probe::Kind::kAck, from, self_, seq});
    return;
  }
  if (!IsLive(target)) return;
  const uint64_t mine = ++seq_;
  relays_[mine] = {from, seq, target, now_ms};
  out->push_back({Probe::Kind::kPing, target, target, mine});
}

void Membership::OnAck(NodeId from, NodeId target, uint64_t seq, double now_ms, std::vector<Probe>* out,
                       Changes* changes) {
  if (auto r = relays_.find(seq); r != relays_.end() && r->second.target == target && from == target) {
    out->push_back({Probe::Kind::kAck, r->second.origin, target, r->second.origin_seq});
    relays_.erase(r);
  }
  if (probing_ && seq == probe_seq_ && target == probe_target_) probing_ = false;
  // An ack is proof of life: a suspect that answered is alive again (at its incarnation, which
  // its own refutation raises for everyone else).
  auto it = members_.find(target);
  if (it != members_.end() && it->second.state == MemberState::kSuspect) {
    Set(target, "", it->second.incarnation, MemberState::kAlive, now_ms, changes);
  }
}

void Membership::ReconnectPing(std::vector<Probe>* out) {
  std::vector<NodeId> dead;
  for (const auto& [node, m] : members_) {
    if (m.state == MemberState::kDead) dead.push_back(node);
  }
  if (dead.empty()) return;
  const NodeId target = dead[rng_.Below(dead.size())];
  const Member& m = members_.at(target);
  // The word of its death goes out again, first in line (the least sent go first, in queue
  // order): the ping carries it, the member refutes
  // it, and its ack carries the refutation back.
  Gossip({target, m.address, m.incarnation, MemberState::kDead});
  std::rotate(pending_.begin(), pending_.end() - 1, pending_.end());
  ++counters_.reconnect_pings;
  out->push_back({Probe::Kind::kPing, target, target, ++seq_});
}

MemberUpdate Membership::Leave() { return {self_, address_, incarnation_, MemberState::kLeft}; }

std::vector<MemberUpdate> Membership::Piggyback() {
  std::vector<MemberUpdate> out;
  // Least-sent first, so new updates spread before old ones repeat.
  std::stable_sort(pending_.begin(), pending_.end(),
                   [](const Pending& a, const Pending& b) { return a.sent < b.sent; });
  for (Pending& p : pending_) {
    if (out.size() >= options_.max_piggyback) break;
    out.push_back(p.update);
    ++p.sent;
  }
  std::erase_if(pending_, [&](const Pending& p) { return p.sent >= options_.retransmissions; });
  return out;
}

std::vector<MemberUpdate> Membership::Snapshot() const {
  std::vector<MemberUpdate> out{{self_, address_, incarnation_, MemberState::kAlive}};
  for (const auto& [node, m] : members_) out.push_back({node, m.address, m.incarnation, m.state});
  return out;
}

bool Membership::IsLive(NodeId node) const {
  if (node == self_) return true;
  auto it = members_.find(node);
  return it != members_.end() && Live(it->second.state);
}

std::vector<NodeId> Membership::LiveMembers() const {
  std::vector<NodeId> out;
  for (const auto& [node, m] : members_) {
    if (Live(m.state)) out.push_back(node);
  }
  return out;
}

}  // namespace plexus::gossip
