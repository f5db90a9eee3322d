#include "core/host_port.h"

namespace plexus {

Result<HostPort> ParseHostPort(std::string_view text) {
  const auto refuse = [&](const std::string& why) {
    return InvalidArgumentError("'" + std::string(text) + "' is not HOST:PORT (" + why + ")");
  };
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) return refuse("no colon before the port");
  std::string_view host = text.substr(0, colon);
  const std::string_view port = text.substr(colon + 1);
  if (!host.empty() && host.front() == '[') {
    if (host.size() < 2 || host.back() != ']') return refuse("the bracket around the host is not closed");
    host = host.substr(1, host.size() - 2);
  } else if (host.find_first_of("[]") != std::string_view::npos) {
    return refuse("a bracket inside the host");
  }
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos) {
    return refuse("the port is not a number");
  }
  const int value = std::stoi(std::string(port));
  if (value > 65535) return refuse("the port is above 65535");
  return HostPort{std::string(host), static_cast<uint16_t>(value)};
}

bool IsLoopbackHost(std::string_view host) {
  return host == "localhost" || host == "::1" || host.substr(0, 4) == "127.";
}

}  // namespace plexus
