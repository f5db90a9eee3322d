#include "gossip/node/member_wire.h"

#include <algorithm>

namespace plexus::gossip {

v1::GossipMember ToProto(const MemberUpdate& u) {
  v1::GossipMember m;
  m.set_node(u.node);
  m.set_address(u.address);
  m.set_incarnation(u.incarnation);
  m.set_state(static_cast<v1::GossipMember::State>(u.state));
  return m;
}

MemberUpdate FromProto(const v1::GossipMember& m) {
  return {m.node(), m.address(), m.incarnation(), static_cast<MemberState>(std::clamp<int>(m.state(), 0, 3))};
}

}  // namespace plexus::gossip
