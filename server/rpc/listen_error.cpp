#include "server/rpc/listen_error.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/host_port.h"

namespace plexus {

std::string WhyCannotListen(const std::string& listen) {
  Result<HostPort> parsed = ParseHostPort(listen);
  if (!parsed.ok()) return parsed.status().message() + " (e.g. --listen 127.0.0.1:50051)";
  const std::string& host = parsed->host;
  const std::string port = std::to_string(parsed->port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found) != 0) {
    return "not a HOST:PORT address (e.g. --listen 127.0.0.1:50051)";
  }
  std::string why = "the address is invalid";
  for (addrinfo* a = found; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    const int bound = ::bind(fd, a->ai_addr, a->ai_addrlen);
    const int err = errno;
    ::close(fd);
    if (bound == 0) continue;
    if (err == EADDRINUSE) {
      why = "port " + port +
            " is already in use (another plexus server?): stop it, or choose another port with --listen HOST:PORT";
    } else if (err == EADDRNOTAVAIL) {
      why = host + " is not an address of this machine (--listen 0.0.0.0:" + port + " listens on all of them)";
    } else if (err == EACCES) {
      why = "ports below 1024 need root: choose another with --listen HOST:PORT";
    } else {
      why = std::strerror(err);
    }
    break;
  }
  freeaddrinfo(found);
  return why;
}

}  // namespace plexus
