// The HTTP listener of --metrics-listen and --dashboard-listen under the connections that once
// silenced it (1,000 idle or 16 slow-drip connections: nothing answered, and Kubernetes restarted
// the pod whose liveness probe it served): a scrape still gets its answer, idle connections are
// closed at their deadline, unknown paths are 404.
#include "apps/plexus/http_endpoint.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace plexus::cli {
namespace {

int Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{10, 0};  // a hung listener fails the test instead of hanging it
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// The whole response to GET PATH, "" when none came.
std::string Get(int port, const std::string& path) {
  const int fd = Connect(port);
  if (fd < 0) return "";
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  std::string response;
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size())) {
    char buffer[4096];
    for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) response.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return response;
}

std::unique_ptr<HttpEndpoint> Start() {
  Result<std::unique_ptr<HttpEndpoint>> e =
      HttpEndpoint::Start("127.0.0.1:0", {{"/metrics", {"text/plain", [] { return std::string("plexus_up 1\n"); }}}});
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

TEST(HttpEndpointTest, AnswersKnownPathsAndRefusesTheRest) {
  auto endpoint = Start();
  ASSERT_NE(endpoint, nullptr);
  const std::string ok = Get(endpoint->port(), "/metrics");
  EXPECT_EQ(ok.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << ok;
  EXPECT_NE(ok.find("Content-Type: text/plain\r\n"), std::string::npos) << ok;
  EXPECT_EQ(ok.substr(ok.find("\r\n\r\n") + 4), "plexus_up 1\n");
  EXPECT_EQ(Get(endpoint->port(), "/other").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(Get(endpoint->port(), "/metrics?x=1").rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_THAT(HttpEndpoint::Start("127.0.0.1", {}).status().message(), ::testing::HasSubstr("HOST:PORT"));
}

TEST(HttpEndpointTest, IdleAndSlowDripConnectionsDoNotSilenceIt) {
  auto endpoint = Start();
  ASSERT_NE(endpoint, nullptr);
  const int port = endpoint->port();
  std::vector<int> idle;
  for (int i = 0; i < 400; ++i) {
    const int fd = Connect(port);
    ASSERT_GE(fd, 0) << i;
    idle.push_back(fd);
  }
  std::atomic<bool> stop{false};
  std::vector<std::thread> drips;
  for (int i = 0; i < 16; ++i) {
    drips.emplace_back([&, port] {
      while (!stop) {
        const int fd = Connect(port);
        if (fd < 0) return;
        const std::string request = "GET /metrics HTTP/1.1\r\nX-Slow: ";
        for (size_t k = 0; k < request.size() + 200 && !stop; ++k) {
          if (::send(fd, "a", 1, MSG_NOSIGNAL) != 1) break;  // closed at its deadline
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
        ::close(fd);
      }
    });
  }
  // Scrapes among them are answered.
  for (int i = 0; i < 5; ++i) {
    const std::string r = Get(port, "/metrics");
    EXPECT_EQ(r.rfind("HTTP/1.1 200 OK", 0), 0u) << "scrape " << i << ": '" << r << "'";
  }
  stop = true;
  for (std::thread& t : drips) t.join();
  // The idle connections were closed by the listener (a new one each pushed out the oldest, or
  // its request deadline passed): every read ends.
  std::vector<pollfd> polled;
  for (int fd : idle) polled.push_back({fd, POLLIN, 0});
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  size_t closed = 0;
  while (closed < idle.size() && std::chrono::steady_clock::now() < until) {
    ::poll(polled.data(), polled.size(), 1000);
    closed = 0;
    for (const pollfd& p : polled) {
      char c;
      closed += (p.revents & (POLLIN | POLLHUP)) && ::recv(p.fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
    }
  }
  EXPECT_EQ(closed, idle.size());
  for (int fd : idle) ::close(fd);
}

}  // namespace
}  // namespace plexus::cli
