#include "apps/plexus/http_endpoint.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <list>
#include <thread>
#include <vector>

#include "core/host_port.h"

namespace plexus::cli {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string Response(int code, const char* reason, const std::string& content_type, const std::string& body) {
  std::string r = "HTTP/1.1 " + std::to_string(code) + " " + reason + "\r\n";
  if (!content_type.empty()) r += "Content-Type: " + content_type + "\r\n";
  r += "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  return r + body;
}

// One thread polls the listening socket and every connection; a connection is one request and
// one response. A library server (cpp-httplib, used before) gave each connection a worker thread
// for as long as the peer liked: 1,000 idle or 16 slow-drip connections left /metrics answering
// nothing, and Kubernetes restarted the pod its liveness probe could not reach.
class PollingEndpoint final : public HttpEndpoint {
 public:
  explicit PollingEndpoint(std::map<std::string, HttpPage> pages) : pages_(std::move(pages)) {}
  ~PollingEndpoint() override {
    stop_ = true;
    if (wake_[1] >= 0) {
      const char c = 0;
      (void)!::write(wake_[1], &c, 1);
    }
    if (thread_.joinable()) thread_.join();
    for (Connection& c : connections_) ::close(c.fd);
    for (int fd : {listen_fd_, wake_[0], wake_[1]}) {
      if (fd >= 0) ::close(fd);
    }
  }

  Status Listen(const std::string& host, int port) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo* found = nullptr;
    const std::string where = host + ":" + std::to_string(port);
    if (::getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) {
      return UnavailableError("cannot listen on " + where + ": the host does not resolve");
    }
    std::string why = "no address";
    for (addrinfo* a = found; a != nullptr && listen_fd_ < 0; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      const int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
        listen_fd_ = fd;
      } else {
        why = std::strerror(errno);
        ::close(fd);
      }
    }
    ::freeaddrinfo(found);
    if (listen_fd_ < 0) return UnavailableError("cannot listen on " + where + ": " + why);
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
    port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    if (::pipe2(wake_, O_NONBLOCK | O_CLOEXEC) != 0) return UnavailableError("cannot make a pipe for " + where);
    thread_ = std::thread([this] { Run(); });
    return Status::Ok();
  }
  int port() const override { return port_; }

 private:
  struct Connection {
    int fd = -1;
    int64_t accepted_ms = 0;
    std::string in;
    std::string out;  // set: responding
    size_t written = 0;
    bool done = false;
  };

  void Run() {
    std::vector<pollfd> polled;
    while (!stop_) {
      polled.clear();
      polled.push_back({listen_fd_, POLLIN, 0});
      polled.push_back({wake_[0], POLLIN, 0});
      for (const Connection& c : connections_) {
        polled.push_back({c.fd, static_cast<short>(c.out.empty() ? POLLIN : POLLOUT), 0});
      }
      if (::poll(polled.data(), polled.size(), 100) < 0 && errno != EINTR) break;
      if (stop_) break;
      size_t i = 2;
      for (Connection& c : connections_) {
        const short ev = polled[i++].revents;
        if (ev & (POLLERR | POLLHUP | POLLNVAL)) c.done = c.out.empty() || (ev & (POLLERR | POLLNVAL));
        if (c.done) continue;
        if (c.out.empty() && (ev & POLLIN)) Read(c);
        if (!c.out.empty() && (ev & POLLOUT)) Write(c);
      }
      const int64_t now = NowMs();
      for (Connection& c : connections_) {
        const int64_t age = now - c.accepted_ms;
        if ((c.out.empty() && age > kRequestDeadlineMs) || age > kResponseDeadlineMs) c.done = true;
      }
      CloseDone();
      if (polled[0].revents & POLLIN) Accept(now);
    }
  }

  void Accept(int64_t now) {
    for (int accepted = 0; accepted < 256; ++accepted) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      if (connections_.size() >= kMaxConnections) {
        // Full: the oldest connection still sending its request makes room (a probe's request
        // comes at once and is answered within one pass, so what is closed is the idlest).
        auto oldest =
            std::find_if(connections_.begin(), connections_.end(), [](const Connection& c) { return c.out.empty(); });
        if (oldest == connections_.end()) {
          ::close(fd);
          continue;
        }
        ::close(oldest->fd);
        connections_.erase(oldest);
      }
      connections_.push_back(Connection{fd, now, {}, {}, 0, false});
    }
  }

  void Read(Connection& c) {
    char buffer[4096];
    const ssize_t n = ::recv(c.fd, buffer, sizeof buffer, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      c.done = true;
      return;
    }
    if (n > 0) c.in.append(buffer, static_cast<size_t>(n));
    const size_t end = c.in.find("\r\n\r\n");
    if (end == std::string::npos) {
      if (c.in.size() > kMaxRequestBytes) c.out = Response(431, "Request Header Fields Too Large", "", "");
      return;
    }
    const std::string line = c.in.substr(0, c.in.find("\r\n"));
    const size_t sp1 = line.find(' ');
    const size_t sp2 = sp1 == std::string::npos ? std::string::npos : line.find(' ', sp1 + 1);
    if (sp2 == std::string::npos) {
      c.out = Response(400, "Bad Request", "", "");
      return;
    }
    const std::string method = line.substr(0, sp1);
    std::string path = line.substr(sp1 + 1, sp2 - sp1 - 1);
    path = path.substr(0, path.find('?'));
    auto page = pages_.find(path);
    if (method != "GET" && method != "HEAD") {
      c.out = Response(405, "Method Not Allowed", "", "");
    } else if (page == pages_.end()) {
      c.out = Response(404, "Not Found", "", "");
    } else {
      c.out = Response(200, "OK", page->second.content_type, page->second.body());
      if (method == "HEAD") c.out.resize(c.out.find("\r\n\r\n") + 4);
    }
  }

  void Write(Connection& c) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.written, c.out.size() - c.written, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      c.done = true;
      return;
    }
    if (n > 0) c.written += static_cast<size_t>(n);
    if (c.written == c.out.size()) {
      ::shutdown(c.fd, SHUT_WR);
      c.done = true;
    }
  }

  void CloseDone() {
    for (auto it = connections_.begin(); it != connections_.end();) {
      if (!it->done) {
        ++it;
        continue;
      }
      ::close(it->fd);
      it = connections_.erase(it);
    }
  }

  static constexpr size_t kMaxConnections = 128;
  static constexpr int64_t kRequestDeadlineMs = 2000;    // from accept to the request's blank line
  static constexpr int64_t kResponseDeadlineMs = 10000;  // from accept to the response's last byte
  static constexpr size_t kMaxRequestBytes = 8192;

  const std::map<std::string, HttpPage> pages_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  int port_ = -1;
  std::atomic<bool> stop_{false};
  std::list<Connection> connections_;  // the polling thread's; oldest first
  std::thread thread_;
};

}  // namespace

Result<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(const std::string& host_port,
                                                          std::map<std::string, HttpPage> pages) {
  PLEXUS_ASSIGN_OR_RETURN(HostPort parsed, ParseHostPort(host_port));
  auto endpoint = std::make_unique<PollingEndpoint>(std::move(pages));
  PLEXUS_RETURN_IF_ERROR(endpoint->Listen(parsed.host, parsed.port));
  return std::unique_ptr<HttpEndpoint>(std::move(endpoint));
}

}  // namespace plexus::cli
