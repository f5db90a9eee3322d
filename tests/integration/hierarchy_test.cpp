// Hierarchical aggregation with real processes on 127.0.0.1 (issue 41): edge aggregators
// (plexus server --upstream) between the clients and the root. Over the same seeded updates a
// flat server and trees of edges publish the same model SHA-256: the partial sums travel as
// int64 fixed point (fedavg_exact), whatever the tree.
#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
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

  struct ServerSettings {
    int k = kClients;  // updates per round; by default all of them (the same updates every run)
    int m = 0;         // quorum; 0: k
    int rounds = kRounds;
    std::string upstream;  // an edge's parent
    std::string address;   // empty: a free port
    std::vector<std::string> extra;
  };
  // A server named `name`; returns its address.
  std::string StartServer(const std::string& name, const ServerSettings& s) {
    const std::string address = s.address.empty() ? "127.0.0.1:" + std::to_string(FreePort()) : s.address;
    std::vector<std::string> args{"server",
                                  "--listen",
                                  address,
                                  "--db",
                                  Path(name + ".db"),
                                  "--rounds",
                                  std::to_string(s.rounds),
                                  "--clients-per-round",
                                  std::to_string(s.k),
                                  "--min-clients",
                                  std::to_string(s.m > 0 ? s.m : s.k),
                                  "--model",
                                  "mlp",
                                  "--local-steps",
                                  "15",
                                  "--no-eval",
                                  "--summary-out",
                                  Path(name + ".json")};
    // Defaults the settings' own flags may replace (a flag given twice is refused).
    const auto given = [&](const char* flag) {
      return std::find(s.extra.begin(), s.extra.end(), flag) != s.extra.end();
    };
    if (!given("--linger-s")) args.insert(args.end(), {"--linger-s", "30"});
    // An edge forwarding raw takes no strategy (its root's runs over the updates).
    if (!given("--strategy") && !given("--upstream-forward") && !given("--dp")) {
      args.insert(args.end(), {"--strategy", "fedavg_exact"});
    }
    if (!s.upstream.empty()) args.insert(args.end(), {"--upstream", s.upstream, "--upstream-client-id", name});
    args.insert(args.end(), s.extra.begin(), s.extra.end());
    processes_.push_back(std::make_unique<ChildProcess>(PLEXUS_BINARY, args, Path(name + ".log")));
    return address;
  }
  std::string StartServer(const std::string& name, int k, const std::string& upstream = "") {
    return StartServer(name, ServerSettings{k, 0, kRounds, upstream, "", {"--round-deadline-s", "120"}});
  }

  // Client i (of kClients, its own iid partition and seed) of the server at `address`.
  void StartClient(int i, const std::string& address, const std::string& run,
                   const std::vector<std::string>& extra = {}) {
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
    args.insert(args.end(), extra.begin(), extra.end());
    processes_.push_back(
        std::make_unique<ChildProcess>(PLEXUS_BINARY, args, Path(run + "-client" + std::to_string(i) + ".log")));
  }

  // Clients 0 and 1 under `first`, 2 and 3 under `second`.
  void StartClientsUnder(const std::string& first, const std::string& second, const std::string& run) {
    for (int i = 0; i < kClients; ++i) StartClient(i, i < kClients / 2 ? first : second, run);
  }

  // Waits for every process but `killed` to exit; each must exit 0.
  void WaitForAll(ChildProcess* killed = nullptr) {
    for (auto& p : processes_) {
      if (p.get() != killed) {
        EXPECT_EQ(p->Wait(240000), 0) << p->Log();
      }
    }
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
  // Each round the root took two partial sums of two clients' updates: it counts the updates.
  for (const auto& round : r2["rounds"]) EXPECT_EQ(round["updates"], kClients) << r2.dump(2);
  // ... and lists them: each client update under its edge, with the hash its edge took of it.
  std::set<std::string> listed;
  for (const auto& c : r2["rounds"].back()["contributions"]) {
    listed.insert(c["client"].get<std::string>());
    EXPECT_EQ(c["update_sha256"].get<std::string>().size(), 64u) << c.dump();
  }
  EXPECT_EQ(listed, (std::set<std::string>{"edge-a/c0", "edge-a/c1", "edge-b/c2", "edge-b/c3"})) << r2.dump(2);
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
  std::set<std::string> paths;
  for (const auto& c : r3["rounds"].back()["contributions"]) paths.insert(c["client"].get<std::string>());
  EXPECT_EQ(paths, (std::set<std::string>{"mid/edge-c/c0", "mid/edge-c/c1", "mid/edge-d/c2", "mid/edge-d/c3"}))
      << r3.dump(2);
}

// `plexus status --json` of the server at `address`; null when it does not answer.
nlohmann::json StatusOf(const std::string& address) {
  std::string out;
  if (testing::RunToCompletion(PLEXUS_BINARY, {"status", "--server", address, "--json", "--timeout-s", "5"}, &out,
                               20000) != 0) {
    return nullptr;
  }
  const size_t brace = out.find('{');
  return brace == std::string::npos ? nullptr : nlohmann::json::parse(out.substr(brace), nullptr, false);
}

// Polls the status of the server at `address` until its `field` reaches `at_least` (at most two
// minutes); returns the last value seen.
int64_t WaitForStatus(const std::string& address, const char* field, int64_t at_least) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  int64_t value = 0;
  while (std::chrono::steady_clock::now() < until && value < at_least) {
    const nlohmann::json st = StatusOf(address);
    if (st.is_object()) value = st.value(field, int64_t{0});
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return value;
}

// An edge killed with SIGKILL mid-federation: the root's rounds go on with the other edge's
// partial sums (its quorum is one), and the killed edge's clients, told at join that the other
// edge is their fallback, turn to it and train there until the federation ends.
TEST_F(HierarchyTest, AKilledEdgesClientsTurnToTheirFallbackAndTheRootGoesOn) {
  // The root lingers briefly: the killed edge is never told that the federation finished.
  const std::string root = StartServer("root", {2, 1, 4, "", "", {"--round-deadline-s", "6", "--linger-s", "2"}});
  const std::string a = "127.0.0.1:" + std::to_string(FreePort());
  const std::string b = "127.0.0.1:" + std::to_string(FreePort());
  StartServer("edge-a", {4, 2, kRounds, root, a, {"--fallback", b, "--selection-wait-s", "1"}});
  ChildProcess* edge_a = processes_.back().get();
  StartServer("edge-b", {4, 2, kRounds, root, b, {"--fallback", a, "--selection-wait-s", "1"}});
  for (int i = 0; i < kClients; ++i) {
    StartClient(i, i < 2 ? a : b, "fail", {"--failover-after-s", "1", "--slowdown", "3"});
  }
  // Once the root has published a version, edge A dies.
  ASSERT_GE(WaitForStatus(root, "model_version", 1), 1) << "the root published nothing";
  edge_a->Signal(SIGKILL);
  EXPECT_EQ(edge_a->Wait(10000), 128 + SIGKILL);
  WaitForAll(/*killed=*/edge_a);

  const nlohmann::json r = Summary("root");
  EXPECT_EQ(r["model_version"], 4) << r.dump(2);
  int dropped = 0;
  for (const auto& round : r["rounds"]) dropped += round["dropped"].get<int>();
  EXPECT_GE(dropped, 1) << "the killed edge's task counts as a dropped client at the root\n" << r.dump(2);
  const nlohmann::json eb = Summary("edge-b");
  EXPECT_EQ(eb["clients"], 4) << "edge A's two clients joined edge B\n" << eb.dump(2);
  for (int i = 0; i < 2; ++i) {
    const std::string log = *ReadFileContents(Path("fail-client" + std::to_string(i) + ".log"));
    const size_t turned = log.find("turning to " + b);
    ASSERT_NE(turned, std::string::npos) << log;
    EXPECT_NE(log.find("uploaded", turned), std::string::npos) << "no task done at the fallback\n" << log;
  }
}

// A server optimizer at the root (FedAdam over the exact sum) under edges that clip each client's
// update to a norm bound: the flat server running both over the same updates publishes the same
// model. The bound is small enough to clip (the clipped and unclipped runs differ).
TEST_F(HierarchyTest, ARootsServerOptimizerOverClippingEdgesPublishesTheFlatModel) {
  const std::string adam = "fedadam:exact=true,lr=0.05", clip = "norm_bound:max=0.05,exact=true";
  const auto with = [](int k, const std::string& upstream, const std::string& strategy) {
    return ServerSettings{k, 0, kRounds, upstream, "", {"--round-deadline-s", "120", "--strategy", strategy}};
  };
  // Clipping at a flat server, and at the edges under a root that sums.
  const std::string plain = StartServer("flat-plain", with(kClients, "", "fedavg_exact"));
  for (int i = 0; i < kClients; ++i) StartClient(i, plain, "flat-plain");
  const std::string flat = StartServer("flat-clip", with(kClients, "", clip));
  for (int i = 0; i < kClients; ++i) StartClient(i, flat, "flat-clip");
  WaitForAll();
  const nlohmann::json f = Summary("flat-clip");
  ASSERT_EQ(f["model_version"], kRounds) << f.dump(2);
  EXPECT_NE(f["final_model_sha256"], Summary("flat-plain")["final_model_sha256"]) << "the bound clipped nothing";

  const std::string root = StartServer("root-clip", with(2, "", "fedavg_exact"));
  StartClientsUnder(StartServer("edge-a", with(2, root, clip)), StartServer("edge-b", with(2, root, clip)), "clip");
  WaitForAll();
  EXPECT_EQ(Summary("root-clip")["final_model_sha256"], f["final_model_sha256"])
      << "clipping at the edges published another model than clipping at a flat server";

  const std::string flat_adam = StartServer("flat-adam", with(kClients, "", adam));
  for (int i = 0; i < kClients; ++i) StartClient(i, flat_adam, "flat-adam");
  WaitForAll();
  const nlohmann::json fa = Summary("flat-adam");
  ASSERT_EQ(fa["model_version"], kRounds) << fa.dump(2);
  // FedAdam at a flat server, and at a root over edges that sum.
  const std::string root_adam = StartServer("root-adam", with(2, "", adam));
  StartClientsUnder(StartServer("edge-c", with(2, root_adam, "fedavg_exact")),
                    StartServer("edge-d", with(2, root_adam, "fedavg_exact")), "adam");
  WaitForAll();
  const nlohmann::json ra = Summary("root-adam");
  EXPECT_EQ(ra["final_model_sha256"], fa["final_model_sha256"])
      << "FedAdam at a root over edges published another model than at a flat server";
  EXPECT_NE(ra["strategy"].get<std::string>().find("exact=true"), std::string::npos) << ra.dump(2);
}

// Edges forwarding every update raw (--upstream-forward raw) to a root running the median: the
// root's rule sees every client update (its rounds count them), and publishes the flat median
// server's model.
TEST_F(HierarchyTest, EdgesForwardingRawGiveTheRootsMedianEveryUpdate) {
  const auto with = [](int k, const std::string& upstream, std::vector<std::string> extra) {
    extra.insert(extra.end(), {"--round-deadline-s", "120"});
    return ServerSettings{k, 0, kRounds, upstream, "", std::move(extra)};
  };
  const std::string flat = StartServer("flat-median", with(kClients, "", {"--strategy", "median"}));
  for (int i = 0; i < kClients; ++i) StartClient(i, flat, "flat-median");
  const std::string root =
      StartServer("root-median", with(2, "", {"--strategy", "median", "--max-bundle-updates", "4"}));
  StartClientsUnder(StartServer("edge-a", with(2, root, {"--upstream-forward", "raw"})),
                    StartServer("edge-b", with(2, root, {"--upstream-forward", "raw"})), "raw");
  WaitForAll();
  const nlohmann::json f = Summary("flat-median"), r = Summary("root-median");
  ASSERT_EQ(f["model_version"], kRounds) << f.dump(2);
  EXPECT_EQ(r["final_model_sha256"], f["final_model_sha256"])
      << "the root's median over forwarded updates is not the flat server's";
  for (const auto& round : r["rounds"]) EXPECT_EQ(round["updates"], kClients) << r.dump(2);
  const std::string log = *ReadFileContents(Path("edge-a.log"));
  EXPECT_NE(log.find("every update forwarded raw"), std::string::npos) << log;
}

// Central DP at a root over edges: each edge clips its clients' deltas and sums them unweighted
// (norm_bound:max=C,exact=true,weighted=false) and lists them; the root checks each partial sum
// against its count times the clip, adds the noise once to the sum of the partials (DP-FTRL: its
// tree's noise, each listed client counted against its cap, here 3 contributions to the one tree
// of 3 versions), and divides by the client updates a version takes (per_release), its rounds
// counting client updates, not edges. Refused at start at a root over named edges: no
// per_release, and adaptive clipping (its count of updates under the clip cannot see inside a
// partial sum).
TEST_F(HierarchyTest, ARootAddsCentralDpNoiseToItsEdgesClippedPartialSums) {
  const auto with = [](int k, const std::string& upstream, std::vector<std::string> extra) {
    extra.insert(extra.end(), {"--round-deadline-s", "120"});
    return ServerSettings{k, 0, kRounds, upstream, "", std::move(extra)};
  };
  const std::string clip = "norm_bound:max=0.05,exact=true,weighted=false";
  const std::string participations = "participations=" + std::to_string(kRounds);
  for (const auto& [name, dp, strategy] :
       {std::tuple<std::string, std::string, std::string>{"central", "central:clip=0.05,noise=0.5,per_release=4",
                                                          "dp_fedavg"},
        {"tree", "tree:clip=0.05,noise=0.5,per_release=4," + participations, "dp_ftrl"}}) {
    const std::string root = StartServer(
        "root-" + name,
        with(2, "", {"--dp", dp, "--dp-population", "100", "--edge-clients", name + "-edge-a," + name + "-edge-b"}));
    StartClientsUnder(StartServer(name + "-edge-a", with(2, root, {"--strategy", clip})),
                      StartServer(name + "-edge-b", with(2, root, {"--strategy", clip})), name);
    WaitForAll();
    const nlohmann::json r = Summary("root-" + name);
    ASSERT_EQ(r["model_version"], kRounds) << r.dump(2);
    for (const auto& round : r["rounds"]) EXPECT_EQ(round["updates"], kClients) << r.dump(2);
    const std::string described = r["strategy"];
    EXPECT_NE(described.find(strategy), std::string::npos) << described;
    EXPECT_NE(described.find("expected=4"), std::string::npos) << described;
    if (name == "tree") {
      EXPECT_NE(described.find(participations), std::string::npos) << described;
    }
  }

  for (const auto& [dp, refusal] :
       {std::pair<std::string, std::string>{"central:clip=0.05,noise=0.5", "per_release=N"},
        {"tree:clip=0.05,noise=0.5", "per_release=N"},
        {"adaptive:clip=0.05,noise=0.5", "adaptive clipping counts the updates under the clip"}}) {
    std::string out;
    EXPECT_NE(testing::RunToCompletion(PLEXUS_BINARY,
                                       {"server", "--dp", dp, "--dp-population", "100", "--edge-clients",
                                        "edge-a,edge-b", "--db", Path("x.db"), "--dry-run"},
                                       &out),
              0)
        << dp << ": " << out;
    EXPECT_NE(out.find(refusal), std::string::npos) << dp << ": " << out;
  }
}

TEST_F(HierarchyTest, AnEdgeRefusesAStrategyThatDoesNotCompose) {
  std::string out;
  const int code = testing::RunToCompletion(
      PLEXUS_BINARY, {"server", "--upstream", "127.0.0.1:1", "--strategy", "median", "--db", Path("x.db"), "--dry-run"},
      &out);
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(out.find("exact partial sums"), std::string::npos) << out;
  EXPECT_NE(out.find("robust rules do not compose"), std::string::npos) << out;
  EXPECT_NE(out.find("--edge-robust"), std::string::npos) << "the refusal names the alternative\n" << out;
  // A server optimizer steps after the sum: the root's to run, not an edge's.
  out.clear();
  EXPECT_NE(testing::RunToCompletion(PLEXUS_BINARY,
                                     {"server", "--upstream", "127.0.0.1:1", "--strategy", "fedadam:exact=true", "--db",
                                      Path("y.db"), "--dry-run"},
                                     &out),
            0)
      << out;
  EXPECT_NE(out.find("belongs at the root"), std::string::npos) << out;
  // Forwarding raw leaves the rule to the root.
  out.clear();
  EXPECT_NE(testing::RunToCompletion(PLEXUS_BINARY,
                                     {"server", "--upstream", "127.0.0.1:1", "--upstream-forward", "raw", "--strategy",
                                      "median", "--db", Path("z.db"), "--dry-run"},
                                     &out),
            0)
      << out;
  EXPECT_NE(out.find("root's --strategy runs over them all"), std::string::npos) << out;
}

// An edge whose first parent address answers nothing turns to the next one it was given.
TEST_F(HierarchyTest, AnEdgeTurnsToItsNextParentWhenTheFirstDoesNotAnswer) {
  const std::string root = StartServer("root", {1, 0, 2, "", "", {"--round-deadline-s", "120"}});
  const std::string nobody = "127.0.0.1:" + std::to_string(FreePort());
  const std::string edge = StartServer(
      "edge",
      {2, 0, kRounds, nobody + "," + root, "", {"--upstream-failover-after-s", "1", "--round-deadline-s", "120"}});
  StartClient(0, edge, "turn");
  StartClient(1, edge, "turn");
  WaitForAll();
  EXPECT_EQ(Summary("root")["model_version"], 2);
  const std::string log = *ReadFileContents(Path("edge.log"));
  EXPECT_NE(log.find("turning to " + root), std::string::npos) << log;
}

// An edge killed with SIGKILL after it acknowledged one client's update, and restarted from its
// store: the round it had open goes on with that update, the late client's update joins it, and
// the root publishes both: nothing the edge acknowledged is lost (counted in the root's record).
TEST_F(HierarchyTest, ARestartedEdgeSendsWhatItAcknowledgedBeforeItWasKilled) {
  const std::string root = StartServer("root", {1, 0, 1, "", "", {"--round-deadline-s", "120"}});
  const std::string edge_address = "127.0.0.1:" + std::to_string(FreePort());
  const ServerSettings edge{2, 0, kRounds, root, edge_address, {"--round-deadline-s", "120"}};
  StartServer("edge", edge);
  ChildProcess* first = processes_.back().get();
  StartClient(0, edge_address, "restart");
  StartClient(1, edge_address, "restart", {"--slowdown", "40"});  // still training when the edge dies
  ASSERT_EQ(WaitForStatus(edge_address, "round_received", 1), 1)
      << "the fast client's update was not acknowledged first";
  first->Signal(SIGKILL);
  ASSERT_EQ(first->Wait(10000), 128 + SIGKILL);
  StartServer("edge", edge);  // the same database and address
  WaitForAll(/*killed=*/first);
  const nlohmann::json r = Summary("root");
  ASSERT_EQ(r["model_version"], 1) << r.dump(2);
  EXPECT_EQ(r["rounds"][0]["updates"], 2) << "the update acknowledged before the kill is in\n" << r.dump(2);
  const std::string fast = *ReadFileContents(Path("restart-client0.log"));
  EXPECT_EQ(fast.find("training round 1 from version 0", fast.find("training round 1 from version 0") + 1),
            std::string::npos)
      << "the fast client trained once: its acknowledged update was kept, not asked again\n"
      << fast;
}

// Under an asynchronous root (FedBuff), each edge is a sub-buffer: every task the root hands it,
// on whatever version is current, is one round of its clients, and its partial's sums are scaled
// by its staleness at the root.
TEST_F(HierarchyTest, EdgesUnderAnAsynchronousRootAreItsSubBuffers) {
  const std::string root =
      StartServer("root", {2, 0, 4, "", "", {"--mode", "async", "--buffer-size", "2", "--round-deadline-s", "120"}});
  const std::string a = StartServer("edge-a", 2, root);
  const std::string b = StartServer("edge-b", 2, root);
  StartClientsUnder(a, b, "async");
  WaitForAll();
  const nlohmann::json r = Summary("root");
  EXPECT_EQ(r["mode"], "async") << r.dump(2);
  EXPECT_EQ(r["model_version"], 4) << r.dump(2);
  EXPECT_NE(r["strategy"].get<std::string>().find("fedavg_exact"), std::string::npos) << r.dump(2);
  // The buffer counts client updates (a partial of two fills a buffer of two): 4 versions of 2.
  int64_t updates = 0;
  for (const auto& version : r["rounds"]) updates += version["updates"].get<int64_t>();
  EXPECT_EQ(updates, 8) << r.dump(2);
  const nlohmann::json ea = Summary("edge-a"), eb = Summary("edge-b");
  EXPECT_GE(ea["updates_accepted"].get<int64_t>() + eb["updates_accepted"].get<int64_t>(), 8)
      << ea.dump(2) << eb.dump(2);
}

// Edges forwarding raw under a FedBuff root (--mode async) running the median: every forwarded
// update is one of the root's buffer (a buffer of four: both edges' two each).
TEST_F(HierarchyTest, EdgesForwardingRawUnderAnAsynchronousRootFillItsBufferWithEveryUpdate) {
  const auto with = [](int k, const std::string& upstream, std::vector<std::string> extra) {
    extra.insert(extra.end(), {"--round-deadline-s", "120"});
    return ServerSettings{k, 0, 2, upstream, "", std::move(extra)};
  };
  const std::string root = StartServer(
      "root",
      with(2, "", {"--mode", "async", "--buffer-size", "4", "--strategy", "median", "--max-bundle-updates", "4"}));
  StartClientsUnder(StartServer("edge-a", with(2, root, {"--upstream-forward", "raw"})),
                    StartServer("edge-b", with(2, root, {"--upstream-forward", "raw"})), "raw-async");
  WaitForAll();
  const nlohmann::json r = Summary("root");
  EXPECT_EQ(r["mode"], "async") << r.dump(2);
  ASSERT_EQ(r["model_version"], 2) << r.dump(2);
  // Bundles of two fill a buffer of four exactly: two versions of four client updates.
  for (const auto& version : r["rounds"]) EXPECT_EQ(version["updates"], 4) << r.dump(2);
  EXPECT_NE(r["strategy"].get<std::string>().find("median"), std::string::npos) << r.dump(2);
}

// Edges under a semi-asynchronous root (FedCompass): each edge is one member of the root's groups;
// the root gives each of its tasks a number of local steps (q_min 20 to q_max 40 here, not the
// edges' own 15), the edge's clients train as many, and the edge's partial sum arrives as the
// member's update. The root publishes every version, its records counting client updates; and
// with edges forwarding raw, a robust rule at the root runs over every client update.
TEST_F(HierarchyTest, EdgesUnderASemiAsynchronousRootTrainTheStepsItAssigns) {
  const std::string root = StartServer(
      "root",
      {2, 0, 3, "", "", {"--mode", "semiasync", "--q-min", "20", "--q-max", "40", "--round-deadline-s", "120"}});
  StartClientsUnder(StartServer("edge-a", 2, root), StartServer("edge-b", 2, root), "semiasync");
  WaitForAll();
  const nlohmann::json r = Summary("root");
  EXPECT_EQ(r["mode"], "semiasync") << r.dump(2);
  ASSERT_EQ(r["model_version"], 3) << r.dump(2);
  int64_t updates = 0;
  for (const auto& version : r["rounds"]) updates += version["updates"].get<int64_t>();
  EXPECT_GE(updates, 6) << "at least two partial sums of two client updates each\n" << r.dump(2);
  // The clients trained the root's assignment, not the edges' --local-steps 15.
  const std::string log = *ReadFileContents(Path("semiasync-client0.log"));
  EXPECT_EQ(log.find("(15 steps"), std::string::npos) << log;
  EXPECT_NE(log.find(" steps, train loss"), std::string::npos) << log;

  // Edges forwarding raw: a robust rule at the semi-asynchronous root over every client update.
  const std::string raw_root =
      StartServer("raw-root", {2,
                               0,
                               3,
                               "",
                               "",
                               {"--mode", "semiasync", "--q-min", "20", "--q-max", "40", "--strategy", "median",
                                "--max-bundle-updates", "2", "--round-deadline-s", "120"}});
  const auto raw_edge = [&](const std::string& name) {
    return StartServer(name, {2, 0, kRounds, raw_root, "", {"--upstream-forward", "raw", "--round-deadline-s", "120"}});
  };
  StartClientsUnder(raw_edge("edge-c"), raw_edge("edge-d"), "semiasync-raw");
  WaitForAll();
  const nlohmann::json rr = Summary("raw-root");
  ASSERT_EQ(rr["model_version"], 3) << rr.dump(2);
  int64_t forwarded = 0;
  for (const auto& version : rr["rounds"]) forwarded += version["updates"].get<int64_t>();
  EXPECT_GE(forwarded, 6) << rr.dump(2);
  EXPECT_NE(rr["strategy"].get<std::string>().find("median"), std::string::npos) << rr.dump(2);
}

// The user's choice for a robust rule: it runs at the edge over its own clients, and the edge's
// summary says so.
TEST_F(HierarchyTest, AnEdgeRobustEdgeRunsItsRuleOverItsOwnClientsAndSaysSo) {
  const std::string root = StartServer("root", {1, 0, 2, "", "", {"--round-deadline-s", "120"}});
  const std::string edge = StartServer(
      "edge", {3, 0, kRounds, root, "", {"--strategy", "median", "--edge-robust", "--round-deadline-s", "120"}});
  for (int i = 0; i < 3; ++i) StartClient(i, edge, "robust");
  WaitForAll();
  EXPECT_EQ(Summary("root")["model_version"], 2);
  const nlohmann::json e = Summary("edge");
  EXPECT_NE(e["strategy"].get<std::string>().find("edge-robust"), std::string::npos) << e.dump(2);
}

}  // namespace
}  // namespace plexus
