#include "gossip/node/peer_address.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include "core/host_port.h"

namespace plexus::gossip {

Result<sockaddr_storage> ResolvePeerAddress(const std::string& address) {
  PLEXUS_ASSIGN_OR_RETURN(HostPort parsed, ParseHostPort(address));
  std::string host = std::move(parsed.host);
  if (host == "localhost") host = "127.0.0.1";
  const uint16_t port = parsed.port;
  sockaddr_storage ss{};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    return ss;
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    return ss;
  }
  return InvalidArgumentError("'" + address + "': the host must be a numeric IPv4 or IPv6 address, or localhost");
}

Status CheckPeerAddress(const std::string& address, const std::string& flag) {
  auto ss = ResolvePeerAddress(address);
  if (!ss.ok()) return InvalidArgumentError(flag + ": " + ss.status().message());
  return Status::Ok();
}

}  // namespace plexus::gossip
