// Why a server could not listen on HOST:PORT, in one line with what to do about it: the port is
// in use, the host is not this machine's, the port needs root, or the address is malformed.
// Found by binding the address once more with a plain socket (gRPC itself only logs it).
#pragma once

#include <string>

namespace plexus {

std::string WhyCannotListen(const std::string& host_port);

}  // namespace plexus
