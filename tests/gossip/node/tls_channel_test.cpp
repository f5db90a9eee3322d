#include "gossip/node/tls_channel.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "apps/plexus/certificate_authority.h"
#include "tests/testing/status_matchers.h"

namespace plexus::gossip {
namespace {

using ::plexus::testing::StatusIs;

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class TlsChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("plexus_tls_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    ASSERT_OK(cli::CreateCertificateAuthority(dir_ / "ca", 1));
    ASSERT_OK(cli::CreateCertificateAuthority(dir_ / "other", 1));
    for (const char* name : {"peer-0", "peer-1"}) {
      ASSERT_OK(cli::IssueCertificate(dir_ / "ca", name, cli::CertificateKind::kPeer, 1));
    }
    ASSERT_OK(cli::IssueCertificate(dir_ / "other", "peer-1", cli::CertificateKind::kPeer, 1));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::shared_ptr<TlsContext> Context(const std::string& ca, const std::string& issuer, const std::string& name) {
    auto c = TlsContext::Create(Read(dir_ / ca / "ca.crt"), Read(dir_ / issuer / (name + ".crt")),
                                Read(dir_ / issuer / (name + ".key")));
    EXPECT_OK(c);
    return c.ok() ? *c : nullptr;
  }

  // Shuttles bytes between the two ends until neither has anything to say. The first error of
  // either end is returned.
  static Status Pump(TlsChannel& a, TlsChannel& b, std::string a_out, std::string* a_plain, std::string* b_plain) {
    std::string b_out;
    for (int i = 0; i < 20 && !(a_out.empty() && b_out.empty()); ++i) {
      std::string next_b;
      PLEXUS_RETURN_IF_ERROR(b.Feed(a_out, b_plain, &next_b));
      a_out.clear();
      b_out += next_b;
      std::string next_a;
      PLEXUS_RETURN_IF_ERROR(a.Feed(b_out, a_plain, &next_a));
      b_out.clear();
      a_out = next_a;
    }
    return Status::Ok();
  }

  std::filesystem::path dir_;
};

TEST_F(TlsChannelTest, MutualHandshakeCarriesBytesBothWaysAndNamesThePeer) {
  auto ctx0 = Context("ca", "ca", "peer-0");
  auto ctx1 = Context("ca", "ca", "peer-1");
  TlsChannel client(*ctx0, true), server(*ctx1, false);
  std::string first;
  ASSERT_OK(client.Start(&first));
  // Written before the handshake completes: held, then sent.
  std::string ignored;
  ASSERT_OK(client.Write("early bytes", &ignored));
  std::string at_client, at_server;
  ASSERT_OK(Pump(client, server, first, &at_client, &at_server));
  ASSERT_TRUE(client.established());
  ASSERT_TRUE(server.established());
  EXPECT_EQ(client.peer_name(), "peer-1");
  EXPECT_EQ(server.peer_name(), "peer-0");
  std::string out;
  ASSERT_OK(client.Write(std::string(100000, 'x'), &out));
  ASSERT_OK(Pump(client, server, out, &at_client, &at_server));
  EXPECT_EQ(at_server, "early bytes" + std::string(100000, 'x'));
  out.clear();
  ASSERT_OK(server.Write("back", &out));
  std::string more;
  ASSERT_OK(client.Feed(out, &at_client, &more));
  EXPECT_EQ(at_client, "back");
}

// Record by record to a callback, as a peer link reads: each piece at most a record (16 KB), all
// of them the bytes written, in order; a callback that says stop gets nothing more from that call.
TEST_F(TlsChannelTest, HandsPlaintextOverRecordByRecordUntilTold) {
  auto ctx0 = Context("ca", "ca", "peer-0");
  auto ctx1 = Context("ca", "ca", "peer-1");
  TlsChannel client(*ctx0, true), server(*ctx1, false);
  std::string first, at_client, at_server;
  ASSERT_OK(client.Start(&first));
  ASSERT_OK(Pump(client, server, first, &at_client, &at_server));
  ASSERT_TRUE(server.established());
  std::string sent;
  for (int i = 0; i < 100000; ++i) sent.push_back(static_cast<char>('a' + i % 26));
  std::string out;
  ASSERT_OK(client.Write(sent, &out));
  std::string got;
  int pieces = 0;
  std::string reply;
  ASSERT_OK(server.Feed(
      out,
      [&](std::string_view piece) {
        EXPECT_LE(piece.size(), 16384u);
        got.append(piece);
        ++pieces;
        return true;
      },
      &reply));
  EXPECT_EQ(got, sent);
  EXPECT_GE(pieces, 7);  // 100,000 bytes in records of at most 16 KB
  out.clear();
  ASSERT_OK(client.Write(sent, &out));
  int stopped_after = 0;
  ASSERT_OK(server.Feed(
      out,
      [&](std::string_view) {
        ++stopped_after;
        return false;
      },
      &reply));
  EXPECT_EQ(stopped_after, 1);
}

TEST_F(TlsChannelTest, ACertificateFromAnotherCaIsRefused) {
  auto ctx0 = Context("ca", "ca", "peer-0");
  auto intruder = Context("other", "other", "peer-1");  // trusts its own CA, presents its own certificate
  TlsChannel client(*ctx0, true), server(*intruder, false);
  std::string first;
  ASSERT_OK(client.Start(&first));
  std::string a, b;
  Status s = Pump(client, server, first, &a, &b);
  EXPECT_EQ(s.code(), StatusCode::kUnauthenticated) << s.message();
  EXPECT_FALSE(client.established() && server.established());
}

TEST_F(TlsChannelTest, GarbageBeforeTheHandshakeIsRefused) {
  auto ctx1 = Context("ca", "ca", "peer-1");
  TlsChannel server(*ctx1, false);
  std::string plain, out;
  EXPECT_THAT(server.Feed(std::string(64, '\x16') + "not a client hello", &plain, &out),
              StatusIs(StatusCode::kUnauthenticated, "TLS"));
  EXPECT_TRUE(plain.empty());
}

TEST_F(TlsChannelTest, KeyOfAnotherCertificateIsRefused) {
  EXPECT_THAT(TlsContext::Create(Read(dir_ / "ca" / "ca.crt"), Read(dir_ / "ca" / "peer-0.crt"),
                                 Read(dir_ / "ca" / "peer-1.key")),
              StatusIs(StatusCode::kInvalidArgument, "--tls-key"));
  EXPECT_THAT(TlsContext::Create("no pem", Read(dir_ / "ca" / "peer-0.crt"), Read(dir_ / "ca" / "peer-0.key")),
              StatusIs(StatusCode::kInvalidArgument, "--tls-ca"));
}

}  // namespace
}  // namespace plexus::gossip
