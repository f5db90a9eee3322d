// A command pointed at the wrong kind of Plexus process gets a one-line answer at once, naming
// what it reached and what to use instead (issue 38), with real processes on 127.0.0.1: a client
// and `status --server` at a peer, `status --peer` and a peer at a server, a second peer with
// an index already taken, plain HTTP at a peer, and a client at a peer over mutual TLS. Every
// command runs with its default --give-up-s (300 s) or more, and must end long before it.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "apps/plexus/certificate_authority.h"
#include "tests/integration/process.h"

namespace plexus {
namespace {

using ::plexus::testing::ChildProcess;
using ::plexus::testing::FreePort;
using ::plexus::testing::RunToCompletion;

constexpr int kAnswerWithinMs = 60000;  // far below every --give-up-s the commands run with

class WrongAddressTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("plexus_wrong_" + std::to_string(::getpid()) + "_" +
                                                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    peer_ = "127.0.0.1:" + std::to_string(FreePort());
    server_ = "127.0.0.1:" + std::to_string(FreePort());
  }
  void TearDown() override {
    if (HasFailure()) testing::PrintLogs(dir_.string(), 2500);
    std::filesystem::remove_all(dir_);
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // A peer of a two-peer federation that waits for its partner (which never comes).
  std::unique_ptr<ChildProcess> StartPeer(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args{
        "peer", "--listen", peer_,           "--num-partitions", "2",  "--partition-index", "0", "--give-up-s",
        "900",  "--db",     Path("peer.db"), "--test-subset",    "200"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto p = std::make_unique<ChildProcess>(PLEXUS_BINARY, args, Path("peer.log"));
    WaitForLog(*p, "listening on");
    return p;
  }
  std::unique_ptr<ChildProcess> StartServer(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args{"server", "--listen", server_, "--db", Path("server.db"), "--rounds", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto p = std::make_unique<ChildProcess>(PLEXUS_BINARY, args, Path("server.log"));
    WaitForLog(*p, "listening on");
    return p;
  }
  static void WaitForLog(ChildProcess& p, const std::string& needle) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (p.Log().find(needle) == std::string::npos && p.running() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_NE(p.Log().find(needle), std::string::npos) << p.Log();
  }

  // Runs a command that must fail; returns what it printed.
  static std::string Refused(const std::vector<std::string>& args) {
    std::string out;
    const int rc = RunToCompletion(PLEXUS_BINARY, args, &out, kAnswerWithinMs);
    EXPECT_NE(rc, -1) << "still waiting after " << kAnswerWithinMs / 1000 << " s: " << out;
    EXPECT_NE(rc, 0) << out;
    return out;
  }

  std::filesystem::path dir_;
  std::string peer_, server_;
};

TEST_F(WrongAddressTest, EachCommandPointedAtAnotherKindIsToldWhatItReached) {
  auto peer = StartPeer();
  auto server = StartServer();
  const std::string at_peer = peer_ +
                              " is a plexus peer: plexus client and plexus status --server need a plexus "
                              "server's address";
  std::string out = Refused({"client", "--server", peer_, "--state-dir", Path("client-state")});
  EXPECT_NE(out.find(at_peer), std::string::npos) << out;
  out = Refused({"status", "--server", peer_});
  EXPECT_NE(out.find(at_peer), std::string::npos) << out;

  const std::string at_server = "answered in HTTP/2 (gRPC): that address is a plexus server's, not a plexus peer's";
  out = Refused({"status", "--peer", server_});
  EXPECT_NE(out.find(at_server), std::string::npos) << out;
  out = Refused({"peer", "--listen", "127.0.0.1:" + std::to_string(FreePort()), "--num-partitions", "2",
                 "--partition-index", "1", "--peers", server_, "--db", Path("wrong.db")});
  EXPECT_NE(out.find(server_ + ": the other side " + at_server), std::string::npos) << out;

  // A second peer started with the index the first holds: refused at the hello, both told.
  const std::string second = "127.0.0.1:" + std::to_string(FreePort());
  out = Refused({"peer", "--listen", second, "--num-partitions", "2", "--partition-index", "0", "--peers", peer_,
                 "--db", Path("second.db")});
  EXPECT_NE(out.find("the peer at " + peer_ +
                     " claims --partition-index 0, this peer's own: start each peer with "
                     "its own --partition-index"),
            std::string::npos)
      << out;
  EXPECT_NE(peer->Log().find("the peer at " + second + " claims --partition-index 0, this peer's own"),
            std::string::npos)
      << peer->Log();

  // Plain HTTP (a browser, curl) gets a 400 that says the same.
  const size_t colon = peer_.rfind(':');
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(peer_.substr(colon + 1))));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string get = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(send(fd, get.data(), get.size(), MSG_NOSIGNAL), static_cast<ssize_t>(get.size()));
  timeval tv{30, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string reply;
  char buf[4096];
  for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) reply.append(buf, static_cast<size_t>(n));
  close(fd);
  EXPECT_EQ(reply.rfind("HTTP/1.1 400 Bad Request\r\n", 0), 0u) << reply;
  EXPECT_NE(reply.find(peer_ + " is a plexus peer"), std::string::npos) << reply;

  // The peer answered all of them and still waits for its partner.
  EXPECT_TRUE(peer->running()) << peer->Log();
  EXPECT_TRUE(server->running()) << server->Log();
}

// Over mutual TLS a gRPC client checks that the certificate names the address before anything
// else; a peer's certificate names none, and the client says so at once instead of retrying.
TEST_F(WrongAddressTest, AClientAtAPeerOverMutualTlsIsToldWhatItReached) {
  ASSERT_TRUE(cli::CreateCertificateAuthority(Path("certs"), 1).ok());
  ASSERT_TRUE(cli::IssueCertificate(Path("certs"), "peer-0", cli::CertificateKind::kPeer, 1).ok());
  ASSERT_TRUE(cli::IssueCertificate(Path("certs"), "client-1", cli::CertificateKind::kClient, 1).ok());
  auto peer = StartPeer({"--tls-ca", Path("certs/ca.crt"), "--tls-cert", Path("certs/peer-0.crt"), "--tls-key",
                         Path("certs/peer-0.key")});
  const std::string out =
      Refused({"client", "--server", peer_, "--state-dir", Path("client-state"), "--tls-ca", Path("certs/ca.crt"),
               "--tls-cert", Path("certs/client-1.crt"), "--tls-key", Path("certs/client-1.key")});
  EXPECT_NE(out.find("the certificate there does not name the address --server gives (is it a plexus peer?"),
            std::string::npos)
      << out;
  EXPECT_TRUE(peer->running()) << peer->Log();
}

}  // namespace
}  // namespace plexus
