// Cross-architecture federations (ctest label `cross`): a client built for another architecture
// (scripts/cross-build.sh) runs under qemu against this machine's server, and its portable
// trainer must produce the very bits an x86-64 client produces. The foreign client is named by
// PLEXUS_CROSS_CLIENT ("EMULATOR BINARY", full paths, e.g. "/usr/bin/qemu-aarch64-static
// /src/build-aarch64/apps/plexus/plexus"); without it the test is skipped, and shows as skipped.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "server/store/sqlite_store.h"
#include "tests/integration/process.h"

namespace plexus {
namespace {

using ::plexus::testing::ChildProcess;
using ::plexus::testing::FreePort;
using ::plexus::testing::RunToCompletion;

class CrossTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist")) GTEST_SKIP() << "dataset not installed";
    const char* cross = std::getenv("PLEXUS_CROSS_CLIENT");
    if (!cross || !*cross) GTEST_SKIP() << "PLEXUS_CROSS_CLIENT is not set (scripts/cross-build.sh sets it)";
    std::istringstream clients(cross);
    for (std::string client; std::getline(clients, client, ';');) {
      std::istringstream words(client);
      std::vector<std::string> command;
      for (std::string w; words >> w;) command.push_back(w);
      if (command.empty()) continue;
      ASSERT_GE(command.size(), 2u) << "each PLEXUS_CROSS_CLIENT entry is 'EMULATOR [ARGS] BINARY', got '" << client
                                    << "'";
      for (const std::string& path : {command.front(), command.back()}) {
        ASSERT_TRUE(std::filesystem::exists(path)) << path << " (give full paths)";
      }
      foreign_.push_back(std::move(command));
    }
    ASSERT_FALSE(foreign_.empty()) << "PLEXUS_CROSS_CLIENT names no client: '" << cross << "'";
    dir_ = std::filesystem::temp_directory_path() / ("plexus_cross_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    if (HasFailure()) testing::PrintLogs(dir_.string(), 3000);
    std::filesystem::remove_all(dir_);
  }

  // One round of one client (`binary` with `prefix` arguments before the client's own) against
  // this machine's server; returns the published version's SHA-256 as the server recorded it.
  std::string OneRound(const std::string& name, const std::string& binary, std::vector<std::string> prefix) {
    const std::string address = "127.0.0.1:" + std::to_string(FreePort());
    const std::string db = (dir_ / (name + ".db")).string();
    ChildProcess server(
        PLEXUS_BINARY,
        {"server", "--listen",      address, "--db",       db,    "--rounds",      "1", "--clients-per-round",
         "1",      "--min-clients", "1",     "--model",    "mlp", "--local-steps", "5", "--batch-size",
         "32",     "--test-subset", "500",   "--linger-s", "30"},
        (dir_ / (name + "-server.log")).string());
    std::vector<std::string> args = std::move(prefix);
    for (const std::string& a : {std::string("client"), std::string("--server"), address}) args.push_back(a);
    for (const char* a : {"--trainer", "portable", "--partition", "iid", "--num-partitions", "20", "--partition-index",
                          "3", "--client-id", "edge", "--give-up-s", "300"}) {
      args.push_back(a);
    }
    ChildProcess client(binary, args, (dir_ / (name + "-client.log")).string());
    EXPECT_EQ(client.Wait(600000), 0) << client.Log();
    EXPECT_EQ(server.Wait(60000), 0) << server.Log();
    auto store = SqliteStore::Open(db);
    EXPECT_TRUE(store.ok());
    if (!store.ok()) return "";
    auto rounds = (*store)->ListRounds();
    EXPECT_TRUE(rounds.ok() && rounds->size() == 1u);
    if (!rounds.ok() || rounds->size() != 1u) return "";
    EXPECT_EQ((*rounds)[0].num_updates, 1);
    return (*rounds)[0].model_sha256;
  }

  // Foreign client i's emulator and what it runs: the emulator's arguments, then the binary.
  std::string Emulator(size_t i) const { return foreign_[i].front(); }
  std::vector<std::string> EmulatorArgs(size_t i) const { return {foreign_[i].begin() + 1, foreign_[i].end()}; }

  std::vector<std::vector<std::string>> foreign_;  // per client: emulator, its arguments, binary
  std::filesystem::path dir_;
};

// Devices as deployed: mutual TLS with certificates from `plexus certs`; every foreign client
// beside an x86-64 one, two sync rounds of all of them.
TEST_F(CrossTest, ForeignClientsJoinAnMtlsFederationAndTwoRoundsComplete) {
  const std::string certs = (dir_ / "certs").string();
  for (const std::vector<std::string>& args : {std::vector<std::string>{"certs", "init", "--dir", certs},
                                               {"certs", "issue", "--dir", certs, "--server", "localhost"},
                                               {"certs", "issue", "--dir", certs, "--client", "x86"}}) {
    std::string out;
    ASSERT_EQ(RunToCompletion(PLEXUS_BINARY, args, &out), 0) << out;
  }
  for (size_t i = 0; i < foreign_.size(); ++i) {
    std::string out;
    ASSERT_EQ(RunToCompletion(PLEXUS_BINARY,
                              {"certs", "issue", "--dir", certs, "--client", "device" + std::to_string(i)}, &out),
              0)
        << out;
  }
  const std::string clients = std::to_string(1 + foreign_.size());
  const std::string port = std::to_string(FreePort());
  const std::string db = (dir_ / "mtls.db").string();
  ChildProcess server(PLEXUS_BINARY,
                      {"server",
                       "--listen",
                       "127.0.0.1:" + port,
                       "--db",
                       db,
                       "--rounds",
                       "2",
                       "--clients-per-round",
                       clients,
                       "--min-clients",
                       clients,
                       "--model",
                       "mlp",
                       "--local-steps",
                       "5",
                       "--batch-size",
                       "32",
                       "--test-subset",
                       "500",
                       "--linger-s",
                       "30",
                       "--tls-cert",
                       certs + "/localhost.crt",
                       "--tls-key",
                       certs + "/localhost.key",
                       "--tls-ca",
                       certs + "/ca.crt"},
                      (dir_ / "mtls-server.log").string());
  auto client_args = [&](const std::string& name, int index) {
    return std::vector<std::string>{"client",
                                    "--server",
                                    "localhost:" + port,
                                    "--trainer",
                                    "portable",
                                    "--partition",
                                    "iid",
                                    "--num-partitions",
                                    "20",
                                    "--partition-index",
                                    std::to_string(index),
                                    "--tls-ca",
                                    certs + "/ca.crt",
                                    "--tls-cert",
                                    certs + "/" + name + ".crt",
                                    "--tls-key",
                                    certs + "/" + name + ".key",
                                    "--give-up-s",
                                    "300"};
  };
  ChildProcess x86(PLEXUS_BINARY, client_args("x86", 1), (dir_ / "mtls-x86.log").string());
  std::vector<std::unique_ptr<ChildProcess>> devices;
  for (size_t i = 0; i < foreign_.size(); ++i) {
    std::vector<std::string> args = EmulatorArgs(i);
    for (const std::string& a : client_args("device" + std::to_string(i), static_cast<int>(2 + i))) args.push_back(a);
    devices.push_back(std::make_unique<ChildProcess>(Emulator(i), args,
                                                     (dir_ / ("mtls-device" + std::to_string(i) + ".log")).string()));
  }
  for (size_t i = 0; i < devices.size(); ++i) {
    EXPECT_EQ(devices[i]->Wait(600000), 0) << devices[i]->Log();
    EXPECT_NE(devices[i]->Log().find("joined as device" + std::to_string(i)), std::string::npos) << devices[i]->Log();
  }
  EXPECT_EQ(x86.Wait(60000), 0) << x86.Log();
  EXPECT_EQ(server.Wait(60000), 0) << server.Log();
  auto store = SqliteStore::Open(db);
  ASSERT_TRUE(store.ok());
  auto rounds = (*store)->ListRounds();
  ASSERT_TRUE(rounds.ok());
  ASSERT_EQ(rounds->size(), 2u);
  for (const RoundRecord& r : *rounds) EXPECT_EQ(r.num_updates, 1 + static_cast<int64_t>(foreign_.size())) << r.round;
}

TEST_F(CrossTest, ForeignClientsUnderQemuTrainTheBitsOfAnX86Client) {
  const std::string here = OneRound("x86", PLEXUS_BINARY, {});
  ASSERT_FALSE(here.empty());
  for (size_t i = 0; i < foreign_.size(); ++i) {
    const std::string there = OneRound("foreign" + std::to_string(i), Emulator(i), EmulatorArgs(i));
    EXPECT_EQ(there, here) << "the portable trainer gave other bits under " << foreign_[i].front() << " "
                           << foreign_[i].back();
  }
}

}  // namespace
}  // namespace plexus
