// Peer addresses: HOST:PORT with a numeric IPv4 or IPv6 host (IPv6 may be bracketed) or
// localhost (127.0.0.1). No name resolution: a peer is reached where it says it listens.
// Stateless functions; thread-safe.
#pragma once

#include <sys/socket.h>

#include <string>

#include "core/status.h"

namespace plexus::gossip {

// InvalidArgument for anything else.
Result<sockaddr_storage> ResolvePeerAddress(const std::string& address);
// The same check, with the message naming `flag`.
Status CheckPeerAddress(const std::string& address, const std::string& flag);

}  // namespace plexus::gossip
