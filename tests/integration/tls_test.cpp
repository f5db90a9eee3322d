// Mutual TLS and client identity, with certificates from `plexus certs` and a real server.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "client/grpc_transport.h"
#include "plexus/v1/federation.grpc.pb.h"
#include "tests/integration/process.h"

namespace plexus {
namespace {

using ::plexus::testing::ChildProcess;
using ::plexus::testing::FreePort;
using ::plexus::testing::RunToCompletion;

std::string Read(const std::filesystem::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("plexus_tls_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    const std::string certs = (dir_ / "certs").string(), evil = (dir_ / "evil").string();
    for (const std::vector<std::string>& args : {std::vector<std::string>{"certs", "init", "--dir", certs},
                                                 {"certs", "issue", "--dir", certs, "--server", "localhost"},
                                                 {"certs", "issue", "--dir", certs, "--client", "alice"},
                                                 {"certs", "issue", "--dir", certs, "--client", "bob"},
                                                 {"certs", "init", "--dir", evil},
                                                 {"certs", "issue", "--dir", evil, "--client", "mallory"}}) {
      std::string out;
      ASSERT_EQ(RunToCompletion(PLEXUS_BINARY, args, &out), 0) << out;
    }
    port_ = FreePort();
    server_ = std::make_unique<ChildProcess>(PLEXUS_BINARY,
                                             std::vector<std::string>{"server",
                                                                      "--listen",
                                                                      "127.0.0.1:" + std::to_string(port_),
                                                                      "--db",
                                                                      (dir_ / "s.db").string(),
                                                                      "--rounds",
                                                                      "1",
                                                                      "--clients-per-round",
                                                                      "1",
                                                                      "--min-clients",
                                                                      "1",
                                                                      "--no-eval",
                                                                      "--tls-cert",
                                                                      certs + "/localhost.crt",
                                                                      "--tls-key",
                                                                      certs + "/localhost.key",
                                                                      "--tls-ca",
                                                                      certs + "/ca.crt",
                                                                      "--linger-s",
                                                                      "5"},
                                             (dir_ / "server.log").string());
    // Wait until it listens.
    for (int i = 0; i < 200 && Read(dir_ / "server.log").find("listening") == std::string::npos; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_NE(Read(dir_ / "server.log").find("mutual TLS"), std::string::npos) << Read(dir_ / "server.log");
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  ClientTls Tls(const std::string& ca_dir, const std::string& name) {
    return {Read(dir_ / "certs" / "ca.crt"), Read(dir_ / ca_dir / (name + ".crt")),
            Read(dir_ / ca_dir / (name + ".key"))};
  }
  std::unique_ptr<v1::Federation::Stub> Stub(std::shared_ptr<grpc::ChannelCredentials> creds) {
    return v1::Federation::NewStub(grpc::CreateChannel("localhost:" + std::to_string(port_), creds));
  }
  grpc::Status Join(v1::Federation::Stub& stub, const std::string& id, std::string* got = nullptr) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::JoinRequest req;
    req.set_client_id(id);
    v1::JoinReply rep;
    grpc::Status s = stub.Join(&ctx, req, &rep);
    if (got) *got = rep.client_id();
    return s;
  }

  std::filesystem::path dir_;
  int port_ = 0;
  std::unique_ptr<ChildProcess> server_;
};

TEST_F(TlsTest, CallersWithoutAValidCertificateAreRefused) {
  auto plain = Stub(grpc::InsecureChannelCredentials());
  EXPECT_EQ(Join(*plain, "alice").error_code(), grpc::StatusCode::UNAVAILABLE);

  ClientTls no_cert{Read(dir_ / "certs" / "ca.crt"), "", ""};
  auto anonymous = Stub(ChannelCredentialsFor(no_cert));
  EXPECT_NE(Join(*anonymous, "alice").error_code(), grpc::StatusCode::OK);

  auto other_ca = Stub(ChannelCredentialsFor(Tls("evil", "mallory")));
  EXPECT_EQ(Join(*other_ca, "mallory").error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(TlsTest, AClientActsOnlyAsItself) {
  auto alice = Stub(ChannelCredentialsFor(Tls("certs", "alice")));
  std::string id;
  ASSERT_TRUE(Join(*alice, "", &id).ok());
  EXPECT_EQ(id, "alice");  // the certificate names the client
  grpc::Status as_bob = Join(*alice, "bob");
  EXPECT_EQ(as_bob.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(as_bob.error_message().find("certificate is for 'alice'"), std::string::npos);

  // Bob gets the round's task; Alice can neither poll as Bob nor upload for Bob's task.
  auto bob = Stub(ChannelCredentialsFor(Tls("certs", "bob")));
  ASSERT_TRUE(Join(*bob, "bob").ok());
  grpc::ClientContext pctx;
  v1::PollTaskRequest preq;
  preq.set_client_id("bob");
  preq.set_wait_ms(3000);
  v1::PollTaskReply prep;
  ASSERT_TRUE(bob->PollTask(&pctx, preq, &prep).ok());
  grpc::ClientContext actx;
  v1::PollTaskReply arep;
  EXPECT_EQ(alice->PollTask(&actx, preq, &arep).error_code(), grpc::StatusCode::PERMISSION_DENIED);

  auto transport = MakeGrpcFederationTransport("localhost:" + std::to_string(port_), Tls("certs", "alice"));
  UploadHeader h;
  h.client_id = "bob";
  h.task_id = prep.has_task() ? prep.task().task_id() : "r1a0-bob";
  EXPECT_EQ(transport->Upload(h, "x").status().code(), StatusCode::kPermissionDenied);
  // As herself Alice passes the identity check; the task is Bob's (or, when the round sampled
  // Alice, no task at all), which the server refuses before it reads a byte of the payload.
  h.client_id = "alice";
  const Status own = transport->Upload(h, "x").status();
  EXPECT_TRUE(own.code() == StatusCode::kPermissionDenied || own.code() == StatusCode::kNotFound) << own.ToString();
  EXPECT_NE(own.message().find("task"), std::string::npos) << own.ToString();
  EXPECT_EQ(own.message().find("certificate"), std::string::npos) << own.ToString();
}

TEST_F(TlsTest, ARealClientTrainsOverMutualTls) {
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist")) GTEST_SKIP() << "dataset not installed";
  const std::string certs = (dir_ / "certs").string();
  ChildProcess client(PLEXUS_BINARY,
                      {"client", "--server", "localhost:" + std::to_string(port_), "--num-partitions", "20",
                       "--partition-index", "3", "--tls-ca", certs + "/ca.crt", "--tls-cert", certs + "/alice.crt",
                       "--tls-key", certs + "/alice.key", "--give-up-s", "60"},
                      (dir_ / "client.log").string());
  EXPECT_EQ(client.Wait(120000), 0) << client.Log();
  EXPECT_EQ(server_->Wait(60000), 0) << server_->Log();
  EXPECT_NE(client.Log().find("joined as alice"), std::string::npos) << client.Log();
}

TEST(ListenTest, NonLoopbackWithoutTlsNeedsInsecure) {
  const auto dir = std::filesystem::temp_directory_path() / ("plexus_listen_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string out;
  const std::string db = (dir / "x.db").string();
  EXPECT_EQ(RunToCompletion(PLEXUS_BINARY, {"server", "--listen", "0.0.0.0:0", "--db", db, "--no-eval"}, &out), 1);
  EXPECT_NE(out.find("refusing to listen on 0.0.0.0:0 without TLS"), std::string::npos) << out;
  EXPECT_EQ(RunToCompletion(PLEXUS_BINARY, {"server", "--listen", "127.0.0.1:0", "--db", db, "--tls-cert", "x"}, &out),
            1);
  EXPECT_NE(out.find("needs all of"), std::string::npos) << out;

  ChildProcess insecure(
      PLEXUS_BINARY,
      {"server", "--listen", "0.0.0.0:" + std::to_string(FreePort()), "--db", db, "--no-eval", "--insecure"},
      (dir / "insecure.log").string());
  for (int i = 0; i < 200 && insecure.Log().find("listening") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(insecure.Log().find("no TLS"), std::string::npos) << insecure.Log();
  insecure.Signal(SIGTERM);
  EXPECT_EQ(insecure.Wait(20000), 0) << insecure.Log();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace plexus
