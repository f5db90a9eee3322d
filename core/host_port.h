// HostPort: the HOST:PORT addresses of the command line (--listen, --server, --peers,
// --metrics-listen). HOST is a name, an IPv4 address, an IPv6 address in brackets
// ([::1]:50051), or empty (every address, where listening); an IPv6 address without brackets
// takes its last colon as the port's (::1:50051 is ::1, port 50051). The one parser of such
// addresses in the tree, so that every flag reads them alike. Stateless functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace plexus {

struct HostPort {
  std::string host;  // without brackets
  uint16_t port = 0;
};

// InvalidArgument, quoting `text`, when it has no colon, a PORT that is not a number in
// [0, 65535], or a bracket that is not closed right before the colon.
Result<HostPort> ParseHostPort(std::string_view text);

// True for localhost, ::1 and 127.0.0.0/8: traffic that never leaves the machine.
bool IsLoopbackHost(std::string_view host);

}  // namespace plexus
