// Hierarchical aggregation with real processes on 127.0.0.1 (issue 41): edge aggregators
// (plexus server --upstream) between the clients and the root. Over the same seeded updates a
// flat server and trees of edges publish the same model SHA-256: the partial sums travel as
// int64 fixed point (fedavg_exact), whatever the tree.
#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/file_contents.h"
#include "tests/integration/process.h"

namespace plexus {
namespace {

using ::plexus::testing::ChildProcess;
using ::plexus::testing::FreePort;

constexpr int kRounds = 3;
constexpr int kClients = 4;

class HierarchyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist")) GTEST_SKIP() << "dataset not installed";
    dir_ = std::filesystem::temp_directory_path() / ("plexus_tree_" + std::to_string(::getpid()) + "_" +
                                                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    if (HasFailure()) testing::PrintLogs(dir_.string(), 3000);
    std::filesystem::remove_all(dir_);
  }

  // A server named `name` taking `k` updates per round (all of them: the same updates every
  // run), under `upstream` when given (an edge). Returns its address.
  std::string StartServer(const std::string& name, int k, const std::string& upstream = "") {
    const std::string address = "127.0.0.1:" + std::to_string(FreePort());
    std::vector<std::string> args{"server",
                                  "--listen",
                                  address,
                                  "--db",
                                  Path(name + ".db"),
                                  "--rounds",
                                  std::to_string(kRounds),
                                  "--clients-per-round",
                                  std::to_string(k),
                                  "--min-clients",
                                  std::to_string(k),
                                  "--strategy",
                                  "fedavg_exact",
                                  "--model",
                                  "mlp",
                                  "--local-steps",
                                  "15",
                                  "--no-eval",
                                  "--summary-out",
                                  Path(name + ".json"),
                                  "--linger-s",
                                  "30",
                                  "--round-deadline-s",
                                  "120"};
    if (!upstream.empty()) {
      args.insert(args.end(), {"--upstream", upstream, "--upstream-client-id", name});
    }
    processes_.push_back(std::make_unique<ChildProcess>(PLEXUS_BINARY, args, Path(name + ".log")));
    return address;
  }

  // Client i (of kClients, its own iid partition and seed) of the server at `address`.
  void StartClient(int i, const std::string& address, const std::string& run) {
    std::vector<std::string> args{"client",
                                  "--server",
                                  address,
                                  "--partition",
                                  "iid",
                                  "--num-partitions",
                                  std::to_string(kClients),
                                  "--partition-index",
                                  std::to_string(i),
                                  "--client-id",
                                  "c" + std::to_string(i),
                                  "--trainer",
                                  "portable",
                                  "--give-up-s",
                                  "120"};
    processes_.push_back(
        std::make_unique<ChildProcess>(PLEXUS_BINARY, args, Path(run + "-client" + std::to_string(i) + ".log")));
  }

  // Clients 0 and 1 under `first`, 2 and 3 under `second`.
  void StartClientsUnder(const std::string& first, const std::string& second, const std::string& run) {
    for (int i = 0; i < kClients; ++i) StartClient(i, i < kClients / 2 ? first : second, run);
  }

  // Waits for every process to exit; each must exit 0.
  void WaitForAll() {
    for (auto& p : processes_) EXPECT_EQ(p->Wait(240000), 0) << p->Log();
    processes_.clear();
  }

  nlohmann::json Summary(const std::string& name) {
    Result<std::string> text = ReadFileContents(Path(name + ".json"));
    EXPECT_TRUE(text.ok()) << text.status().ToString();
    return text.ok() ? nlohmann::json::parse(*text) : nlohmann::json();
  }

  std::string Path(const std::string& file) const { return (dir_ / file).string(); }

  std::filesystem::path dir_;
  std::vector<std::unique_ptr<ChildProcess>> processes_;
};

TEST_F(HierarchyTest, FlatTwoEdgesAndThreeLevelsPublishTheSameModel) {
  // Flat: one server, four clients.
  const std::string flat = StartServer("flat", kClients);
  for (int i = 0; i < kClients; ++i) StartClient(i, flat, "flat");
  WaitForAll();
  const nlohmann::json f = Summary("flat");
  ASSERT_EQ(f["model_version"], kRounds) << f.dump(2);
  const std::string sha = f["final_model_sha256"];

  // Two edges of two clients each under a root that takes both edges' partial sums per round.
  const std::string root = StartServer("root2", 2);
  const std::string a = StartServer("edge-a", 2, root);
  const std::string b = StartServer("edge-b", 2, root);
  StartClientsUnder(a, b, "two");
  WaitForAll();
  const nlohmann::json r2 = Summary("root2");
  EXPECT_EQ(r2["model_version"], kRounds) << r2.dump(2);
  EXPECT_EQ(r2["final_model_sha256"], sha) << "two edges published another model than the flat server";
  EXPECT_EQ(r2["clients"], 2) << "the root's clients are the two edges";
  // Each round the root took two partial sums, each carrying two clients' examples.
  for (const auto& round : r2["rounds"]) EXPECT_EQ(round["updates"], 2) << r2.dump(2);
  EXPECT_EQ(r2["rounds"].back()["examples"], f["rounds"].back()["examples"]) << r2.dump(2) << f.dump(2);

  // Three levels: the root takes one middle edge, which takes the two edges of two clients.
  const std::string top = StartServer("root3", 1);
  const std::string mid = StartServer("mid", 2, top);
  const std::string c = StartServer("edge-c", 2, mid);
  const std::string d = StartServer("edge-d", 2, mid);
  StartClientsUnder(c, d, "three");
  WaitForAll();
  const nlohmann::json r3 = Summary("root3");
  EXPECT_EQ(r3["model_version"], kRounds) << r3.dump(2);
  EXPECT_EQ(r3["final_model_sha256"], sha) << "a three-level tree published another model than the flat server";
}

TEST_F(HierarchyTest, AnEdgeRefusesAStrategyThatDoesNotCompose) {
  std::string out;
  const int code = testing::RunToCompletion(
      PLEXUS_BINARY, {"server", "--upstream", "127.0.0.1:1", "--strategy", "median", "--db", Path("x.db"), "--dry-run"},
      &out);
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(out.find("exact partial sums"), std::string::npos) << out;
  EXPECT_NE(out.find("robust rules do not compose"), std::string::npos) << out;
}

}  // namespace
}  // namespace plexus
