#include "gossip/node/peer_address.h"

#include <arpa/inet.h>
#include <netinet/in.h>

namespace plexus::gossip {

Result<sockaddr_storage> ResolvePeerAddress(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return InvalidArgumentError("'" + address + "' is not HOST:PORT");
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host == "localhost") host = "127.0.0.1";
  const std::string port_text = address.substr(colon + 1);
  if (port_text.empty() || port_text.size() > 5 || port_text.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(port_text) > 65535) {
    return InvalidArgumentError("'" + address + "' has no valid port");
  }
  const auto port = static_cast<uint16_t>(std::stoi(port_text));
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
