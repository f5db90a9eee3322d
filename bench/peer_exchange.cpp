// Model exchange between two `plexus peer` nodes over loopback (gossip/node/peer_node.h), against
// what the exchange is on the wire, measured in the same run: two opposite raw streams at once on
// one connection, each end one thread (as each node runs one loop thread), plain TCP and TLS 1.3
// through the same OpenSSL contexts the peers use (the same certificates, so the same cipher).
// Both nodes run D-PSGD on two nodes with a trainer that returns its start model, so every round
// is: each node sends its model to the other in chunks (CRC-32C per chunk on plaintext, TLS
// records otherwise), receives and decodes the other's, checks it, averages.
// Reported: model bytes per second in each direction (both directions run at once), its ratio to
// the raw streams, with and without TLS; and the user-space memory a peer holds per idle
// connection (heap growth over many connected links, each past its hello).
// usage: peer_exchange [--mb MODEL_MB] [--rounds R] [--only plain|tls] [--nodes N]   (prints a JSON
// object; with --only, just that exchange's rate, for profiling; --nodes: that many nodes on the
// complete topology instead of two, so that each sends its model to N - 1 others each round: the
// rate is then model bytes sent per second by one node, all its links together)
#include <arpa/inet.h>
#include <fcntl.h>
#include <malloc.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "apps/plexus/certificate_authority.h"
#include "core/memory_tuning.h"
#include "gossip/node/frame.h"
#include "gossip/node/peer_node.h"
#include "plexus/v1/gossip.pb.h"

namespace plexus {
namespace {

using Clock = std::chrono::steady_clock;

int FreePort() {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  close(s);
  return ntohs(a.sin_port);
}

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  for (int attempt = 0; attempt < 200; ++attempt) {
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the listener is starting
  }
  return -1;
}

// A listening socket on 127.0.0.1:`port`, for one connection.
int Listen(int port) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a);
  listen(listener, 1);
  return listener;
}

// One end of a duplex stream: sends `bytes` in 1 MiB writes while it receives as many, on one
// thread (non-blocking socket, poll), through `ssl` when given (after its handshake). False on
// an error.
bool PumpBothWays(int fd, SSL* ssl, uint64_t bytes) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  std::string out(1 << 20, 'x');
  std::vector<char> in(1 << 20);
  uint64_t sent = 0, got = 0;
  while (sent < bytes || got < bytes) {
    pollfd p{fd, static_cast<short>(POLLIN | (sent < bytes ? POLLOUT : 0)), 0};
    if (!(ssl && SSL_pending(ssl) > 0) && poll(&p, 1, 10000) <= 0) {
      std::fprintf(stderr, "raw duplex: nothing moved for 10 s (sent %llu, received %llu)\n",
                   static_cast<unsigned long long>(sent), static_cast<unsigned long long>(got));
      return false;
    }
    for (;;) {  // read what is there
      const int n = ssl ? SSL_read(ssl, in.data(), static_cast<int>(in.size()))
                        : static_cast<int>(recv(fd, in.data(), in.size(), 0));
      if (n > 0) {
        got += static_cast<uint64_t>(n);
        continue;
      }
      if (ssl ? SSL_get_error(ssl, n) == SSL_ERROR_WANT_READ || SSL_get_error(ssl, n) == SSL_ERROR_WANT_WRITE
              : (n < 0 && errno == EAGAIN)) {
        break;
      }
      std::fprintf(stderr, "raw duplex: read failed (%d, %s)\n", ssl ? SSL_get_error(ssl, n) : n, std::strerror(errno));
      ERR_print_errors_fp(stderr);
      return false;
    }
    while (sent < bytes) {  // write what fits
      const int want = static_cast<int>(std::min<uint64_t>(out.size(), bytes - sent));
      const int n = ssl ? SSL_write(ssl, out.data(), want) : static_cast<int>(send(fd, out.data(), want, MSG_NOSIGNAL));
      if (n > 0) {
        sent += static_cast<uint64_t>(n);
        continue;
      }
      if (ssl ? SSL_get_error(ssl, n) == SSL_ERROR_WANT_WRITE || SSL_get_error(ssl, n) == SSL_ERROR_WANT_READ
              : (n < 0 && errno == EAGAIN)) {
        break;
      }
      std::fprintf(stderr, "raw duplex: write failed (%d, %s)\n", ssl ? SSL_get_error(ssl, n) : n,
                   std::strerror(errno));
      return false;
    }
  }
  return true;
}

// Two opposite streams of `bytes` each at once on one loopback connection, in the process layout
// of the exchange (one thread per end), plain or through `tls`'s contexts: bytes per second in
// each direction.
double RawDuplex(uint64_t bytes, const gossip::TlsContext* tls) {
  const int port = FreePort();
  const int listener = Listen(port);
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  // Handshake (blocking), then both ends start together.
  auto end = [&](int fd, bool initiator, bool* ok) {
    SSL* ssl = nullptr;
    if (tls) {
      ssl = SSL_new(initiator ? tls->client() : tls->server());
      SSL_set_fd(ssl, fd);
      SSL_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
      if ((initiator ? SSL_connect(ssl) : SSL_accept(ssl)) != 1) {
        ERR_print_errors_fp(stderr);
        *ok = false;
      }
    }
    ++ready;
    while (!go) std::this_thread::yield();  // a start line, not a wait for work
    if (*ok) *ok = PumpBothWays(fd, ssl, bytes);
    return ssl;
  };
  bool ok0 = true, ok1 = true;
  // Sockets closed and TLS state freed once both ends are done: an end closing early could reset
  // the other.
  int dialed = -1;
  SSL* ssl0 = nullptr;
  SSL* ssl1 = nullptr;
  std::thread dialer([&] {
    dialed = Connect(port);
    ssl1 = end(dialed, true, &ok1);
  });
  const int fd = accept(listener, nullptr, nullptr);
  std::thread acceptor([&] { ssl0 = end(fd, false, &ok0); });
  while (ready < 2) std::this_thread::yield();
  const auto start = Clock::now();
  go = true;
  acceptor.join();
  dialer.join();
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  for (SSL* ssl : {ssl0, ssl1}) {
    if (ssl) SSL_free(ssl);
  }
  close(fd);
  close(dialed);
  close(listener);
  if (!ok0 || !ok1) {
    std::fprintf(stderr, "raw duplex stream failed\n");
    return 0;
  }
  return static_cast<double>(bytes) / s;
}

// One raw TCP stream of `bytes`, in 1 MiB writes: bytes per second (the figure before issue 39).
double RawTcp(uint64_t bytes) {
  const int port = FreePort();
  const int listener = Listen(port);
  std::thread sender([&] {
    const int fd = Connect(port);
    std::string chunk(1 << 20, 'x');
    for (uint64_t sent = 0; sent < bytes;) {
      const ssize_t n = send(fd, chunk.data(), std::min<uint64_t>(chunk.size(), bytes - sent), 0);
      if (n <= 0) break;
      sent += static_cast<uint64_t>(n);
    }
    close(fd);
  });
  const int fd = accept(listener, nullptr, nullptr);
  std::vector<char> buf(1 << 20);
  const auto start = Clock::now();
  uint64_t got = 0;
  for (ssize_t n; (n = recv(fd, buf.data(), buf.size(), 0)) > 0;) got += static_cast<uint64_t>(n);
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  sender.join();
  close(fd);
  close(listener);
  return static_cast<double>(got) / s;
}

class Identity final : public gossip::PeerTrainer {
 public:
  Result<ModelState> Train(const ModelState& start, uint64_t) override { return ModelState(start); }
  Result<double> Evaluate(const ModelState&) override { return 0.0; }
};

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// `nodes` nodes (two unless asked) exchanging a `floats`-sized model for `rounds` rounds: model
// bytes per second node 0 sends (to each other node, all at once), timed on node 0 from its first
// completed round to its last.
double Exchange(size_t floats, uint64_t rounds, const std::string& cert_dir, size_t nodes = 2) {
  auto factory = gossip::MakeGossip("dpsgd:wait_ms=20000", "mean");
  ModelState model = *ModelState::Create({{"w", {static_cast<int64_t>(floats)}}});
  for (size_t i = 0; i < floats; ++i) model.data()[i] = static_cast<float>(i % 97) * 0.01f;
  std::vector<std::string> address;
  for (size_t i = 0; i < nodes; ++i) address.push_back("127.0.0.1:" + std::to_string(FreePort()));
  std::vector<Identity> trainers(nodes);
  auto options = [&](gossip::NodeId id) {
    gossip::PeerNodeOptions o;
    o.self = id;
    o.nodes = nodes;
    o.listen = address[id];
    if (id > 0) o.seeds = {address[0]};
    o.rounds = rounds;
    o.topology = "complete";
    o.run = "bench";
    o.linger_ms = 200;
    o.eval_every = 0;
    if (!cert_dir.empty()) {
      const std::string name = cert_dir + "/peer-" + std::to_string(id);
      o.tls = *gossip::TlsContext::Create(Read(cert_dir + "/ca.crt"), Read(name + ".crt"), Read(name + ".key"));
    }
    return o;
  };
  std::vector<std::unique_ptr<gossip::PeerNode>> peers;
  for (size_t i = 0; i < nodes; ++i) {
    peers.push_back(std::make_unique<gossip::PeerNode>(options(static_cast<gossip::NodeId>(i)), factory->get(), model,
                                                       &trainers[i], nullptr));
  }
  Clock::time_point first, last;
  std::atomic<bool> stop{false};
  std::vector<std::thread> others;
  for (size_t i = 1; i < nodes; ++i) others.emplace_back([&, i] { (void)peers[i]->Run(&stop); });
  auto stats = peers[0]->Run(&stop, [&](const gossip::PeerNodeStats& s) {
    if (s.rounds_completed == 1) first = Clock::now();
    if (s.rounds_completed == rounds) last = Clock::now();
  });
  for (std::thread& t : others) t.join();
  if (!stats.ok()) {
    std::fprintf(stderr, "exchange failed: %s\n", stats.status().message().c_str());
    return 0;
  }
  const double s = std::chrono::duration<double>(last - first).count();
  return static_cast<double>(rounds - 1) * static_cast<double>(model.num_bytes()) * static_cast<double>(nodes - 1) / s;
}

// Heap bytes in use (glibc): the process's own allocations, whatever the allocator keeps cached.
int64_t HeapInUse() { return static_cast<int64_t>(mallinfo2().uordblks); }

// User-space memory a peer holds per idle link: heap growth while `links` raw clients are
// connected to it, each past its hello. (Kernel socket buffers are not counted.)
double BytesPerConnection(int links) {
  auto factory = gossip::MakeGossip("el:s=1", "mean");
  ModelState model = *ModelState::Create({{"w", {1000}}});
  const int port = FreePort();
  gossip::PeerNodeOptions o;
  o.self = 0;
  o.nodes = 2;
  o.listen = "127.0.0.1:" + std::to_string(port);
  o.rounds = 1000000;  // it never finishes on its own: `stop` ends it
  o.run = "bench";
  Identity trainer;
  gossip::PeerNode node(o, factory->get(), model, &trainer, nullptr);
  std::atomic<bool> stop{false};
  std::thread t([&] { (void)node.Run(&stop); });
  // The hello of node 1 claims the same id on every link: the first becomes node 0's link to it,
  // the rest stay open as extra links, which is what is measured.
  v1::GossipEnvelope hello;
  hello.mutable_hello()->set_node(1);
  hello.mutable_hello()->set_nodes(2);
  hello.mutable_hello()->set_address("127.0.0.1:1");
  hello.mutable_hello()->set_run("bench");
  hello.mutable_hello()->set_wire_version(gossip::kGossipWireVersion);
  const std::string frame = gossip::EncodeFrame(gossip::FrameType::kMessage, 0, 0, hello.SerializeAsString());
  const int warm = Connect(port);
  send(warm, frame.data(), frame.size(), MSG_NOSIGNAL);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // settle allocations of the first link
  const int64_t before = HeapInUse();
  std::vector<int> fds;
  for (int i = 0; i < links; ++i) {
    const int fd = Connect(port);
    send(fd, frame.data(), frame.size(), MSG_NOSIGNAL);
    fds.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the node reads the hellos
  const int64_t after = HeapInUse();
  stop = true;
  for (int fd : fds) close(fd);
  close(warm);
  t.join();
  return static_cast<double>(after - before) / links;
}

}  // namespace
}  // namespace plexus

int main(int argc, char** argv) {
  using namespace plexus;
  KeepLargeAllocations();  // as the plexus binary does
  double mb = 4;
  uint64_t rounds = 40;
  std::string only;
  size_t nodes = 2;
  const char* usage = "usage: peer_exchange [--mb MODEL_MB] [--rounds R] [--only plain|tls] [--nodes N]\n";
  for (int i = 1; i < argc; i += 2) {
    const bool valued = i + 1 < argc;
    if (valued && std::strcmp(argv[i], "--only") == 0) {
      only = argv[i + 1];
    } else if (valued && std::strcmp(argv[i], "--nodes") == 0) {
      nodes = std::max<size_t>(2, std::strtoull(argv[i + 1], nullptr, 10));
    } else if (valued && std::strcmp(argv[i], "--mb") == 0) {
      mb = std::atof(argv[i + 1]);
    } else if (valued && std::strcmp(argv[i], "--rounds") == 0) {
      rounds = std::strtoull(argv[i + 1], nullptr, 10);
    } else {
      const bool help = std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0;
      std::fputs(usage, help ? stdout : stderr);
      return help ? 0 : 2;
    }
  }
  if (!(mb > 0) || rounds == 0 || (!only.empty() && only != "plain" && only != "tls")) {
    std::fputs(usage, stderr);
    return 2;
  }
  spdlog::set_level(std::getenv("PLEXUS_BENCH_LOG") ? spdlog::level::info : spdlog::level::warn);
  const size_t floats = static_cast<size_t>(mb * 1e6 / 4);
  const std::string dir = std::filesystem::temp_directory_path() / ("plexus_bench_certs_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  bool certified = cli::CreateCertificateAuthority(dir, 1).ok();
  for (size_t i = 0; i < nodes; ++i) {
    certified =
        certified && cli::IssueCertificate(dir, "peer-" + std::to_string(i), cli::CertificateKind::kPeer, 1).ok();
  }
  if (!certified) {
    std::fprintf(stderr, "cannot create certificates in %s\n", dir.c_str());
    return 1;
  }
  if (!only.empty()) {
    const double rate = Exchange(floats, rounds, only == "tls" ? dir : "", nodes);
    std::filesystem::remove_all(dir);
    std::printf("{\"model_mb\": %.2f, \"%s_exchange_gbps\": %.3f}\n", mb, only.c_str(), rate / 1e9);
    return rate > 0 ? 0 : 1;
  }
  const uint64_t stream_bytes = std::max<uint64_t>(static_cast<uint64_t>(floats) * 4 * rounds, 1ull << 30);
  const std::string name = dir + "/peer-0";
  const auto tls_context =
      gossip::TlsContext::Create(Read(dir + "/ca.crt"), Read(name + ".crt"), Read(name + ".key")).value();
  const double raw = RawTcp(stream_bytes);
  const double duplex = RawDuplex(stream_bytes, nullptr);
  const double duplex_tls = RawDuplex(stream_bytes / 2, tls_context.get());
  const double plain = Exchange(floats, rounds, "");
  const double tls = Exchange(floats, rounds, dir);
  const double per_link = BytesPerConnection(256);
  std::filesystem::remove_all(dir);
  std::printf(
      "{\"model_mb\": %.2f, \"rounds\": %llu, \"raw_tcp_gbps\": %.3f, \"duplex_tcp_gbps\": %.3f, "
      "\"duplex_tls_gbps\": %.3f, \"exchange_gbps\": %.3f, \"exchange_vs_duplex\": %.3f, "
      "\"exchange_tls_gbps\": %.3f, \"exchange_tls_vs_duplex\": %.3f, \"exchange_vs_one_stream\": %.3f, "
      "\"bytes_per_idle_link\": %.0f}\n",
      mb, static_cast<unsigned long long>(rounds), raw / 1e9, duplex / 1e9, duplex_tls / 1e9, plain / 1e9,
      plain / duplex, tls / 1e9, tls / duplex_tls, plain / raw, per_link);
  return plain > 0 && tls > 0 && duplex > 0 && duplex_tls > 0 ? 0 : 1;
}
