#include "gossip/membership/membership_view.h"

#include <vector>

namespace plexus::gossip {

void MembershipView::Neighbours(NodeId self, uint64_t round, std::vector<NodeId>* out, bool outgoing) const {
  if (topology_.kind() == Topology::Kind::kComplete) {
    *out = membership_->LiveMembers();
    std::erase_if(*out, [&](NodeId j) { return j == self || j >= topology_.size(); });
    return;
  }
  outgoing ? topology_.Out(self, round, out) : topology_.In(self, round, out);
  std::erase_if(*out, [&](NodeId j) { return !membership_->IsLive(j); });
}

}  // namespace plexus::gossip
