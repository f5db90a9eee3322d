#include "simulations/swim_driver.h"

#include <utility>

namespace plexus {

using gossip::Membership;
using gossip::MemberUpdate;

namespace {

void Add(Membership::Counters* sum, const Membership::Counters& c) {
  sum->suspicions += c.suspicions;
  sum->deaths += c.deaths;
  sum->refutations += c.refutations;
  sum->reconnect_pings += c.reconnect_pings;
}

}  // namespace

SwimDriver::SwimDriver(size_t n, const gossip::Topology* topology, EventNetwork* net, uint64_t seed, Hooks hooks)
    : n_(n), net_(net), seed_(seed), hooks_(std::move(hooks)), members_(n), views_(n) {
  for (NodeId i = 0; i < n_; ++i) {
    members_[i].emplace(i, "", 1, gossip::MembershipOptions{}, seed_);
    views_[i] = std::make_unique<gossip::MembershipView>(topology, &*members_[i]);
  }
  Membership::Changes ignored;
  for (NodeId i = 0; i < n_; ++i) {
    for (NodeId j = 0; j < n_; ++j) {
      if (i != j) members_[i]->Apply({j, "", 1, gossip::MemberState::kAlive}, 0.0, &ignored);
    }
  }
}

void SwimDriver::Tick(NodeId i) {
  std::vector<Membership::Probe> probes;
  Membership::Changes changes;
  members_[i]->Tick(net_->now_ms(), &probes, &changes);
  SendProbes(i, probes);
  Changed(i, changes);
}

std::vector<MemberUpdate> SwimDriver::Piggyback(NodeId i) {
  std::vector<MemberUpdate> rumours = members_[i]->Piggyback();
  bytes_ += kRumourBytes * rumours.size();
  return rumours;
}

void SwimDriver::Hear(NodeId j, const std::vector<MemberUpdate>& rumours) {
  Membership::Changes changes;
  for (const MemberUpdate& u : rumours) members_[j]->Apply(u, net_->now_ms(), &changes);
  Changed(j, changes);
}

// A kPingRequest is a ping about its target sent to a helper, as on the wire.
void SwimDriver::SendProbes(NodeId i, const std::vector<Membership::Probe>& probes) {
  for (const Membership::Probe& p : probes) {
    std::vector<MemberUpdate> rumours = members_[i]->Piggyback();
    const uint64_t bytes = kProbeBytes + kRumourBytes * rumours.size();
    bytes_ += bytes;
    const bool sent = net_->SendControl(i, p.to, bytes, [this, i, p, rumours = std::move(rumours)] {
      const NodeId j = p.to;
      if (!hooks_.live(j)) return;
      Membership::Changes changes;
      const double now = net_->now_ms();
      for (const MemberUpdate& u : rumours) members_[j]->Apply(u, now, &changes);
      std::vector<Membership::Probe> out;
      if (p.kind == Membership::Probe::Kind::kAck) {
        members_[j]->OnAck(i, p.target, p.seq, now, &out, &changes);
      } else {
        members_[j]->OnPing(i, p.target, p.seq, now, &out);
      }
      SendProbes(j, out);
      Changed(j, changes);
    });
    if (!sent) hooks_.lost();
  }
}

void SwimDriver::Changed(NodeId j, const Membership::Changes& changes) {
  if (!changes.joined.empty() || !changes.left.empty()) hooks_.changed(j, changes);
}

void SwimDriver::Restart(NodeId i) {
  const std::vector<MemberUpdate> remembered = members_[i]->Snapshot();
  // Above anything the node said before (a peer uses the wall clock in milliseconds).
  const uint64_t incarnation = members_[i]->incarnation() + 1 + static_cast<uint64_t>(net_->now_ms());
  Add(&retired_, members_[i]->counters());
  members_[i].emplace(i, "", incarnation, gossip::MembershipOptions{}, seed_ ^ incarnation);
  Membership::Changes ignored;
  for (const MemberUpdate& u : remembered) {
    if (u.node != i) members_[i]->Apply(u, net_->now_ms(), &ignored);
  }
  const MemberUpdate hello{i, "", incarnation, gossip::MemberState::kAlive};
  for (NodeId j : members_[i]->LiveMembers()) {
    bytes_ += kProbeBytes + kRumourBytes;
    const bool sent = net_->SendControl(i, j, kProbeBytes + kRumourBytes, [this, i, j, hello] {
      if (!hooks_.live(j)) return;
      Hear(j, {hello});
      std::vector<MemberUpdate> snapshot = members_[j]->Snapshot();
      const uint64_t bytes = kProbeBytes + kRumourBytes * snapshot.size();
      bytes_ += bytes;
      const bool answered = net_->SendControl(j, i, bytes, [this, i, snapshot = std::move(snapshot)] {
        if (hooks_.live(i)) Hear(i, snapshot);
      });
      if (!answered) hooks_.lost();
    });
    if (!sent) hooks_.lost();
  }
}

Membership::Counters SwimDriver::counters() const {
  Membership::Counters sum = retired_;
  for (const auto& m : members_) Add(&sum, m->counters());
  return sum;
}

int64_t SwimDriver::WrongViews() const {
  int64_t wrong = 0;
  for (NodeId i = 0; i < n_; ++i) {
    if (!hooks_.live(i)) continue;
    for (NodeId j = 0; j < n_; ++j) wrong += j != i && members_[i]->IsLive(j) != hooks_.live(j);
  }
  return wrong;
}

}  // namespace plexus
