// Membership updates on the wire: MemberUpdate (membership.h) to and from plexus.v1.GossipMember,
// for the peer node and the status client alike. An unknown state number reads as the nearest
// known one (0..3). Stateless functions; thread-safe.
#pragma once

#include "gossip/membership/membership.h"
#include "plexus/v1/gossip.pb.h"

namespace plexus::gossip {

v1::GossipMember ToProto(const MemberUpdate& u);
MemberUpdate FromProto(const v1::GossipMember& m);

}  // namespace plexus::gossip
