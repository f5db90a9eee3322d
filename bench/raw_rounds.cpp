// raw_rounds: the wire's own limit for bench/run_load.sh's end-to-end federation. A sync round of
// FedAvg moves each update byte twice over loopback: the model to every client (its download),
// then each client's update back (its upload), and the next round's downloads start only once
// every upload of this one is in. This program moves exactly those bytes and nothing else: a
// "server" process with one thread per client connection and a "clients" process with one
// thread per client (the layout of `plexus server` and bench/federation_load), plain TCP on
// 127.0.0.1 (TCP_NODELAY, as gRPC), 1 MiB reads and writes into buffers allocated once; no framing, no checksums, no
// decoding, no aggregation. Prints one JSON line: update bytes per second (clients x model bytes
// x rounds over the wall time of the rounds), the figure the federation's is divided by.
// usage: raw_rounds [--clients N] [--mb MODEL_MB] [--rounds R]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <barrier>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr size_t kPiece = size_t{1} << 20;

bool SendAll(int fd, const char* data, size_t bytes) {
  for (size_t at = 0; at < bytes;) {
    const ssize_t n = send(fd, data + at % kPiece, std::min(kPiece - at % kPiece, bytes - at), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    at += static_cast<size_t>(n);
  }
  return true;
}

bool ReceiveAll(int fd, char* data, size_t bytes) {
  for (size_t at = 0; at < bytes;) {
    const ssize_t n = recv(fd, data + at % kPiece, std::min(kPiece - at % kPiece, bytes - at), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    at += static_cast<size_t>(n);
  }
  return true;
}

// As gRPC sets it: a round's last partial segment goes out at once instead of after the ACK of
// the one before (Nagle), which would hold every round back.
void NoDelay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int Fail(const char* what) {
  std::fprintf(stderr, "raw_rounds: %s: %s\n", what, std::strerror(errno));
  return 1;
}

// The clients' process: connects `clients` sockets, then each thread receives a model and sends
// an update back, `rounds` times. Exit status 0 when every byte moved.
int RunClients(int port, int clients, size_t model_bytes, int rounds) {
  std::vector<int> fds;
  for (int i = 0; i < clients; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return Fail("connect");
    NoDelay(fd);
    fds.push_back(fd);
  }
  std::vector<char> failed(static_cast<size_t>(clients), 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      std::vector<char> model(kPiece), update(kPiece, 'u');
      for (int r = 0; r < rounds; ++r) {
        if (!ReceiveAll(fds[i], model.data(), model_bytes) || !SendAll(fds[i], update.data(), model_bytes)) {
          failed[i] = 1;
          return;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int fd : fds) close(fd);
  for (char f : failed) {
    if (f) return Fail("a client's transfer");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int clients = 10, rounds = 60;
  double mb = 4.0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::puts(
          "usage: raw_rounds [--clients N (10)] [--mb MODEL_MB (4)] [--rounds R (60)]\n"
          "Moves a sync round's bytes over loopback TCP and nothing else: each round the model to every\n"
          "client, then each client's update back. Prints update bytes per second as one JSON line.");
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "raw_rounds: %s needs a value (see --help)\n", a.c_str());
      return 2;
    }
    const std::string v = argv[++i];
    if (a == "--clients") {
      clients = std::atoi(v.c_str());
    } else if (a == "--mb") {
      mb = std::atof(v.c_str());
    } else if (a == "--rounds") {
      rounds = std::atoi(v.c_str());
    } else {
      std::fprintf(stderr, "raw_rounds: unknown option %s (see --help)\n", a.c_str());
      return 2;
    }
  }
  if (clients < 1 || rounds < 1 || !(mb > 0)) {
    std::fprintf(stderr, "raw_rounds: --clients, --rounds and --mb must be positive\n");
    return 2;
  }
  const size_t model_bytes = static_cast<size_t>(mb * 1e6);

  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  socklen_t len = sizeof a;
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      listen(listener, clients) != 0 || getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return Fail("listen");
  }
  const int port = ntohs(a.sin_port);
  const pid_t child = fork();
  if (child < 0) return Fail("fork");
  if (child == 0) _exit(RunClients(port, clients, model_bytes, rounds));

  std::vector<int> fds;
  for (int i = 0; i < clients; ++i) {
    const int fd = accept(listener, nullptr, nullptr);
    if (fd < 0) return Fail("accept");
    NoDelay(fd);
    fds.push_back(fd);
  }
  // The round closes when every upload is in: the next downloads wait at the barrier.
  std::barrier round_closed(clients);
  std::vector<char> failed(static_cast<size_t>(clients), 0);
  std::vector<std::thread> threads;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      std::vector<char> model(kPiece, 'm'), update(kPiece);
      for (int r = 0; r < rounds; ++r) {
        if (!failed[i] &&
            (!SendAll(fds[i], model.data(), model_bytes) || !ReceiveAll(fds[i], update.data(), model_bytes))) {
          failed[i] = 1;
          shutdown(fds[i], SHUT_RDWR);
        }
        round_closed.arrive_and_wait();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int fd : fds) close(fd);
  int status = 0;
  waitpid(child, &status, 0);
  for (char f : failed) {
    if (f) return Fail("a server transfer");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "raw_rounds: the clients' process failed\n");
    return 1;
  }
  const double update_bytes = static_cast<double>(clients) * static_cast<double>(model_bytes) * rounds;
  std::printf(
      "{\"clients\": %d, \"model_bytes\": %zu, \"rounds\": %d, \"seconds\": %.3f, \"update_bytes_per_s\": %.0f}\n",
      clients, model_bytes, rounds, seconds, update_bytes / seconds);
  return 0;
}
