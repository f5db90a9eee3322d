// Real federations: a plexus server and client processes on 127.0.0.1.
#include <gtest/gtest.h>
#include <signal.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <thread>

#include "server/store/sqlite_store.h"
#include "tests/integration/process.h"

namespace plexus {
namespace {

using ::plexus::testing::ChildProcess;
using ::plexus::testing::FreePort;

class FederationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist")) GTEST_SKIP() << "dataset not installed";
    dir_ = std::filesystem::temp_directory_path() / ("plexus_fed_" + std::to_string(::getpid()) + "_" +
                                                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    address_ = "127.0.0.1:" + std::to_string(FreePort());
    db_ = (dir_ / "server.db").string();
    summary_ = (dir_ / "summary.json").string();
  }
  void TearDown() override {
    if (HasFailure()) testing::PrintLogs(dir_.string(), 3000);
    std::filesystem::remove_all(dir_);
  }

  std::unique_ptr<ChildProcess> StartServer(int rounds, const std::string& log,
                                            const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args{"server",
                                  "--listen",
                                  address_,
                                  "--db",
                                  db_,
                                  "--rounds",
                                  std::to_string(rounds),
                                  "--clients-per-round",
                                  std::to_string(clients_per_round_),
                                  "--min-clients",
                                  std::to_string(clients_per_round_),
                                  "--model",
                                  model_,
                                  "--test-subset",
                                  test_subset_,
                                  "--summary-out",
                                  summary_,
                                  "--linger-s",
                                  "60",
                                  "--round-deadline-s",
                                  "120"};
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<ChildProcess>(PLEXUS_BINARY, args, (dir_ / log).string());
  }

  // Clients 0..n-1 of model_ on IID partitions, client i keeping its state in dir_/state<i>.
  std::vector<std::unique_ptr<ChildProcess>> StartClientsWithStateDirs(int n) {
    std::vector<std::unique_ptr<ChildProcess>> clients;
    for (int i = 0; i < n; ++i) {
      const std::filesystem::path state = dir_ / ("state" + std::to_string(i));
      std::filesystem::create_directories(state);
      clients.push_back(std::make_unique<ChildProcess>(
          PLEXUS_BINARY,
          std::vector<std::string>{"client", "--server", address_, "--model", model_, "--partition", "iid",
                                   "--num-partitions", std::to_string(n), "--partition-index", std::to_string(i),
                                   "--client-id", "c" + std::to_string(i), "--give-up-s", "120", "--state-dir",
                                   state.string()},
          (dir_ / ("client" + std::to_string(i) + ".log")).string()));
    }
    return clients;
  }

  // Clients 0..n-1; the last `slow` of them run with --slowdown 8.
  std::vector<std::unique_ptr<ChildProcess>> StartClients(int n, int slow = 0) {
    std::vector<std::unique_ptr<ChildProcess>> clients;
    for (int i = 0; i < n; ++i) {
      std::vector<std::string> args{"client",
                                    "--server",
                                    address_,
                                    "--partition",
                                    "iid",
                                    "--num-partitions",
                                    std::to_string(n),
                                    "--partition-index",
                                    std::to_string(i),
                                    "--client-id",
                                    "c" + std::to_string(i),
                                    "--give-up-s",
                                    "120"};
      if (i >= n - slow) {
        args.push_back("--slowdown");
        args.push_back("8");
      }
      clients.push_back(std::make_unique<ChildProcess>(PLEXUS_BINARY, args,
                                                       (dir_ / ("client" + std::to_string(i) + ".log")).string()));
    }
    return clients;
  }

  size_t CommittedRounds() {
    auto store = SqliteStore::Open(db_);
    if (!store.ok()) return 0;
    auto rounds = (*store)->ListRounds();
    return rounds.ok() ? rounds->size() : 0;
  }

  nlohmann::json Summary() {
    std::ifstream in(summary_);
    return nlohmann::json::parse(in);
  }

  // Runs 6 clients, 2 of them 8x slower, against `server` to the end; checks that some slow
  // task saw at least two versions published while it trained, that all `versions` were
  // committed and that the model improved. Returns the committed rounds.
  std::vector<RoundRecord> RunSixClientsTwoSlow(ChildProcess& server, size_t versions);

  // `plexus status --json` of the server; null when it does not answer.
  nlohmann::json ServerStatus() {
    std::string out;
    if (testing::RunToCompletion(PLEXUS_BINARY, {"status", "--server", address_, "--json", "--timeout-s", "5"}, &out,
                                 20000) != 0) {
      return nullptr;
    }
    const size_t brace = out.find('{');
    return brace == std::string::npos ? nullptr : nlohmann::json::parse(out.substr(brace), nullptr, false);
  }

  // Polls the server's status until `done` holds for it (true) or `seconds` pass (false).
  bool WaitForStatus(const std::function<bool(const nlohmann::json&)>& done, int seconds, ChildProcess& server) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (std::chrono::steady_clock::now() < until && server.running()) {
      const nlohmann::json st = ServerStatus();
      if (st.is_object() && done(st)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  // The server's norm bounds and checks refused no honest client's update for what it held
  // (INVALID_ARGUMENT); late or stale uploads may be refused for other reasons. The adaptive norm
  // bound once locked honest clients out for good (issue 34).
  static void ExpectNoHonestUpdateRefused(ChildProcess& server,
                                          const std::vector<std::unique_ptr<ChildProcess>>& clients) {
    EXPECT_EQ(server.Log().find("refused upload: INVALID_ARGUMENT"), std::string::npos) << server.Log();
    for (const auto& c : clients) EXPECT_EQ(c->Log().find("INVALID_ARGUMENT"), std::string::npos) << c->Log();
  }

  std::filesystem::path dir_;
  std::string address_, db_, summary_;
  int clients_per_round_ = 4;
  std::string model_ = "mlp", test_subset_ = "2000";  // StartServer's --model and --test-subset
};

TEST_F(FederationTest, ServerAndFourClientsTrainThreeRounds) {
  auto server = StartServer(3, "server.log");
  auto clients = StartClients(4);
  ASSERT_EQ(server->Wait(240000), 0) << server->Log();
  for (auto& c : clients) EXPECT_EQ(c->Wait(30000), 0) << c->Log();
  ExpectNoHonestUpdateRefused(*server, clients);

  nlohmann::json s = Summary();
  EXPECT_EQ(s["rounds_completed"], 3);
  EXPECT_EQ(s["model_version"], 3);
  EXPECT_GT(s["final_test_accuracy"].get<double>(), 0.6);  // chance is 0.1
  EXPECT_TRUE(s.contains("wall_time_s"));
  // Rounds 2 and 3 were closed by an upload and followed a served version: both timed, each
  // after-the-last-upload time within the time between the versions.
  const nlohmann::json after = s["transfers"]["after_last_upload"];
  EXPECT_EQ(after["versions"], 2) << s;
  EXPECT_GE(after["mean_ms"].get<double>(), 0.0) << s;
  EXPECT_GE(after["share_of_version_interval"].get<double>(), 0.0) << s;
  EXPECT_LE(after["share_of_version_interval"].get<double>(), 1.0) << s;

  auto store = *SqliteStore::Open(db_);
  EXPECT_EQ(*store->CheckpointVersions(), (std::vector<uint64_t>{0, 1, 2, 3}));
  auto rounds = *store->ListRounds();
  ASSERT_EQ(rounds.size(), 3u);
  for (const auto& r : rounds) {
    EXPECT_EQ(r.num_updates, 4);
    EXPECT_EQ((*store->Checkpoint(r.model_version)).ContentSha256(), r.model_sha256);
  }

  std::string out;
  std::string exported = (dir_ / "final.safetensors").string();
  ASSERT_EQ(testing::RunToCompletion(PLEXUS_BINARY, {"export", "--db", db_, "--out", exported}, &out), 0) << out;
  EXPECT_NE(out.find("version 3"), std::string::npos) << out;
}

// Issue 42's language model over gRPC: tinylm on the fortunes corpus, DiLoCo's outer Nesterov step
// at the server over 20 inner AdamW steps per client and round, the clients' moments kept in their
// state directories from round to round. The validation loss must end below the corpus's unigram
// baseline (the entropy of its validation bytes, about 4.79 bits per character for Debian's
// fortunes 1.99.1): the model learned more than byte frequencies. The sim's run of the same
// settings reached 4.43 after five rounds.
TEST_F(FederationTest, FourClientsTrainTheLanguageModelWithDiLoCoBelowTheUnigramBaseline) {
  if (!std::filesystem::exists("/usr/share/games/fortunes/fortunes")) GTEST_SKIP() << "fortunes not installed";
  model_ = "tinylm";
  test_subset_ = "200";
  auto server = StartServer(5, "server.log",
                            {"--strategy", "diloco", "--optimizer", "adamw", "--lr", "0.002", "--weight-decay", "0.01",
                             "--local-steps", "20", "--batch-size", "16"});
  std::vector<std::unique_ptr<ChildProcess>> clients = StartClientsWithStateDirs(4);
  ASSERT_EQ(server->Wait(600000), 0) << server->Log();
  for (auto& c : clients) EXPECT_EQ(c->Wait(30000), 0) << c->Log();
  ExpectNoHonestUpdateRefused(*server, clients);
  nlohmann::json s = Summary();
  EXPECT_EQ(s["model_version"], 5);
  ASSERT_TRUE(s["unigram_bits_per_char"].is_number()) << s;
  ASSERT_TRUE(s["final_test_bits_per_char"].is_number()) << s;
  const double unigram = s["unigram_bits_per_char"].get<double>();
  EXPECT_NEAR(unigram, 4.79, 0.1) << s;
  EXPECT_LT(s["final_test_bits_per_char"].get<double>(), unigram) << s;
  EXPECT_NEAR(s["final_test_bits_per_char"].get<double>(), s["final_test_loss"].get<double>() / std::log(2.0), 1e-9);
  // Each client kept AdamW's moments on disk after its tasks.
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(std::filesystem::exists(dir_ / ("state" + std::to_string(i)) / "optimizer.safetensors")) << i;
  }
}

// Issue 42's DeMo over gRPC: each client takes one plain SGD step per task and uploads its update
// through the dct codec, whose decaying residual (kept in the client's state directory) is DeMo's
// momentum: 8 DCT coefficients of every 64 values travel, as (1-byte index, float32) pairs, so an
// upload is about 40/256 of its float32 size. The server steps by the sign of their mean. After
// five rounds the language model is well below the 8 bits per character of an untrained byte
// model (log2 256; the manual run of this setting reached 5.7).
TEST_F(FederationTest, DeMoClientsUploadTheirMomentumsFastComponentsAndKeepTheRest) {
  if (!std::filesystem::exists("/usr/share/games/fortunes/fortunes")) GTEST_SKIP() << "fortunes not installed";
  model_ = "tinylm";
  test_subset_ = "200";
  const int rounds = 5, n = 4;
  auto server =
      StartServer(rounds, "server.log",
                  {"--strategy", "demo:lr=0.002", "--upload-codec", "dct:chunk=64,k=8,decay=0.999", "--optimizer",
                   "sgd", "--lr", "1", "--momentum", "0", "--local-steps", "1", "--batch-size", "16"});
  std::vector<std::unique_ptr<ChildProcess>> clients = StartClientsWithStateDirs(n);
  ASSERT_EQ(server->Wait(600000), 0) << server->Log();
  for (auto& c : clients) EXPECT_EQ(c->Wait(30000), 0) << c->Log();
  ExpectNoHonestUpdateRefused(*server, clients);
  nlohmann::json s = Summary();
  EXPECT_EQ(s["rounds_completed"], rounds);
  ASSERT_TRUE(s["final_test_bits_per_char"].is_number()) << s;
  EXPECT_LT(s["final_test_bits_per_char"].get<double>(), 7.0) << s;
  // 20 uploads of 867,072 values (3,468,288 bytes in float32 without the header).
  const double ratio = s["transfers"]["upload_bytes_received"].get<double>() / (20.0 * 867072 * 4);
  EXPECT_GT(ratio, 40.0 / 256 - 0.01) << s["transfers"];
  EXPECT_LT(ratio, 40.0 / 256 + 0.02) << s["transfers"];
  // What was not sent waits in each client's residual, on disk.
  for (int i = 0; i < n; ++i) {
    EXPECT_TRUE(std::filesystem::exists(dir_ / ("state" + std::to_string(i)) / "residual.safetensors")) << i;
  }
}

TEST_F(FederationTest, ClientsUploadAndDownloadInInt8AtAQuarterOfTheBytes) {
  auto server = StartServer(3, "server.log", {"--codec", "int8"});
  auto clients = StartClients(4);
  ASSERT_EQ(server->Wait(240000), 0) << server->Log();
  for (auto& c : clients) EXPECT_EQ(c->Wait(30000), 0) << c->Log();
  ExpectNoHonestUpdateRefused(*server, clients);

  nlohmann::json s = Summary();
  EXPECT_EQ(s["rounds_completed"], 3);
  EXPECT_GT(s["final_test_accuracy"].get<double>(), 0.6);
  // 12 updates of the MLP (636,400 bytes each as float32 safetensors), each a quarter of that
  // in int8: one byte per value, a float scale per 4096 values.
  const double float32_bytes = 12.0 * 636400;
  const double ratio = s["transfers"]["upload_bytes_received"].get<double>() / float32_bytes;
  EXPECT_GT(ratio, 0.24);
  EXPECT_LT(ratio, 0.26);
  EXPECT_NE(clients[0]->Log().find("in int8"), std::string::npos) << clients[0]->Log();
  // 12 task downloads (each client's first the whole model, then the change from what it
  // rebuilt), a quarter of float32 each plus, for whole models, the tensors' names and shapes.
  const double download_ratio = s["transfers"]["download_bytes"].get<double>() / float32_bytes;
  EXPECT_GT(download_ratio, 0.24);
  EXPECT_LT(download_ratio, 0.26);
  for (auto& c : clients) {
    EXPECT_EQ(c->Log().find("downloading float32"), std::string::npos) << c->Log();
    EXPECT_NE(c->Log().find("bytes in int8 (the change from the last download)"), std::string::npos) << c->Log();
  }
}

TEST_F(FederationTest, ServerKilledAfterRoundTwoResumesAndClientsReconnect) {
  auto server = StartServer(5, "server1.log");
  auto clients = StartClients(4);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(180);
  while (CommittedRounds() < 2 && std::chrono::steady_clock::now() < until && server->running()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GE(CommittedRounds(), 2u) << server->Log();
  server->Signal(SIGKILL);
  ASSERT_EQ(server->Wait(10000), 128 + SIGKILL);
  const size_t at_kill = CommittedRounds();
  ASSERT_LT(at_kill, 5u) << "the federation finished before the kill; nothing to resume";

  // The server stays down until every client has noticed (a failed call, then a retry), so
  // that the restart is a reconnection and not a blip nobody saw.
  auto retries = [](const std::string& log) {
    size_t n = 0;
    for (size_t at = log.find("retrying"); at != std::string::npos; at = log.find("retrying", at + 1)) ++n;
    return n;
  };
  std::vector<size_t> before;
  for (auto& c : clients) before.push_back(retries(c->Log()));
  const auto noticed_by = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (size_t i = 0; i < clients.size(); ++i) {
    while (retries(clients[i]->Log()) == before[i] && clients[i]->running() &&
           std::chrono::steady_clock::now() < noticed_by) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_GT(retries(clients[i]->Log()), before[i]) << "client " << i << " never noticed the outage\n"
                                                     << clients[i]->Log();
  }
  auto restarted = StartServer(5, "server2.log");
  ASSERT_EQ(restarted->Wait(240000), 0) << restarted->Log();
  EXPECT_NE(restarted->Log().find("resuming from checkpoint version " + std::to_string(at_kill)), std::string::npos)
      << restarted->Log();
  for (auto& c : clients) EXPECT_EQ(c->Wait(30000), 0) << c->Log();

  auto store = *SqliteStore::Open(db_);
  EXPECT_EQ(*store->CheckpointVersions(), (std::vector<uint64_t>{0, 1, 2, 3, 4, 5}));
  auto rounds = *store->ListRounds();
  ASSERT_EQ(rounds.size(), 5u);
  for (size_t i = 0; i < rounds.size(); ++i) EXPECT_EQ(rounds[i].round, i + 1);
  EXPECT_GT(Summary()["final_test_accuracy"].get<double>(), 0.6);
}

TEST_F(FederationTest, AClientKilledMidUploadAndRestartedSendsOnlyTheRestOfIt) {
  clients_per_round_ = 1;
  auto server = StartServer(2, "server.log");
  auto client = [&](const std::string& log, const std::vector<std::string>& extra) {
    std::vector<std::string> args{"client",
                                  "--server",
                                  address_,
                                  "--partition",
                                  "iid",
                                  "--num-partitions",
                                  "20",
                                  "--partition-index",
                                  "0",
                                  "--state-dir",
                                  (dir_ / "client-state").string(),
                                  "--give-up-s",
                                  "120"};
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<ChildProcess>(PLEXUS_BINARY, args, (dir_ / log).string());
  };
  // The first run uploads its update (the MLP's 0.64 MB) at 64 KiB/s, so that it is killed with
  // part of it sent: once the server has received 128 KiB and before it has everything.
  auto first = client("client-first.log", {"--max-upload-kib-s", "64"});
  int64_t received_at_kill = 0;
  ASSERT_TRUE(WaitForStatus(
      [&](const nlohmann::json& st) {
        received_at_kill = st["upload_bytes_received"].get<int64_t>();
        return received_at_kill >= (128 << 10);
      },
      180, *server))
      << first->Log();
  first->Signal(SIGKILL);
  ASSERT_EQ(first->Wait(10000), 128 + SIGKILL);
  const std::string first_log = first->Log();
  ASSERT_EQ(first_log.find("uploaded"), std::string::npos) << "the upload finished before the kill\n" << first_log;

  // The server notices the cut stream and keeps what arrived (refusing the incomplete upload).
  ASSERT_TRUE(WaitForStatus(
      [](const nlohmann::json& st) {
        int64_t refused = 0;
        for (const auto& [code, n] : st["refusals"].items()) refused += n.get<int64_t>();
        return refused >= 1;
      },
      60, *server));

  auto second = client("client-second.log", {});
  ASSERT_EQ(server->Wait(240000), 0) << server->Log();
  EXPECT_EQ(second->Wait(30000), 0) << second->Log();

  // The restarted client sent the update the first one trained, from where the server's copy
  // stopped (at least the 128 KiB seen before the kill): no byte arrived twice. It did not
  // train round 1 again.
  const nlohmann::json transfers = Summary()["transfers"];
  EXPECT_EQ(transfers["uploads_resumed"], 1);
  EXPECT_GE(transfers["upload_bytes_resumed"].get<int64_t>(), received_at_kill);
  const int64_t update_bytes = 636400;                                             // the MLP's delta as safetensors
  EXPECT_EQ(transfers["upload_bytes_received"].get<int64_t>(), 2 * update_bytes);  // rounds 1 and 2, once each
  const std::string second_log = second->Log();
  EXPECT_NE(second_log.find("sending the update trained before the restart"), std::string::npos) << second_log;
  EXPECT_EQ(second_log.find("training round 1 "), std::string::npos) << second_log;
  EXPECT_NE(second_log.find("training round 2 "), std::string::npos) << second_log;
  auto store = *SqliteStore::Open(db_);
  EXPECT_EQ(store->ListRounds()->size(), 2u);
}

// Versions the server published while each task of a client's log was in training: for every
// "training round R from version B" line, the "server at version V" of its upload, V - B.
std::vector<int> VersionsPublishedDuringTasks(const std::string& log) {
  std::vector<int> out;
  std::istringstream in(log);
  std::string line;
  long long base = -1;
  while (std::getline(in, line)) {
    size_t at = line.find("from version ");
    if (line.find("training round") != std::string::npos && at != std::string::npos) {
      base = std::stoll(line.substr(at + 13));
    }
    at = line.find("server at version ");
    if (at != std::string::npos && base >= 0) {
      out.push_back(static_cast<int>(std::stoll(line.substr(at + 18)) - base));
      base = -1;
    }
  }
  return out;
}

std::vector<RoundRecord> FederationTest::RunSixClientsTwoSlow(ChildProcess& server, size_t versions) {
  auto clients = StartClients(6, /*slow=*/2);
  EXPECT_EQ(server.Wait(240000), 0) << server.Log();
  for (auto& c : clients) EXPECT_EQ(c->Wait(30000), 0) << c->Log();
  ExpectNoHonestUpdateRefused(server, clients);
  int most = 0;
  for (int i = 4; i < 6; ++i) {
    for (int published : VersionsPublishedDuringTasks(clients[i]->Log())) most = std::max(most, published);
  }
  EXPECT_GE(most, 2) << "no slow task saw two or more versions published meanwhile";
  auto store = SqliteStore::Open(db_);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  if (!store.ok()) return {};
  std::vector<RoundRecord> rounds = *(*store)->ListRounds();
  EXPECT_EQ(rounds.size(), versions);
  if (rounds.size() >= 2) {
    EXPECT_GT(*rounds.back().test_accuracy, *rounds.front().test_accuracy);
  }
  return rounds;
}

TEST_F(FederationTest, AsyncFastClientsAreNeverBlockedBehindSlowOnes) {
  // 60 versions of 2 updates: about 30 fast tasks' time, several slow (8x) tasks.
  auto server = StartServer(60, "server.log", {"--mode", "async", "--buffer-size", "2", "--max-staleness", "1000"});
  const std::vector<RoundRecord> rounds = RunSixClientsTwoSlow(*server, 60);
  nlohmann::json s = Summary();
  EXPECT_EQ(s["mode"], "async");
  EXPECT_EQ(s["model_version"], 60);
  EXPECT_GE(s["updates_accepted"].get<int>(), 120);
}

TEST_F(FederationTest, SemiAsyncGroupsFastClientsWithoutWaitingForSlowOnes) {
  // Speeds differ 8x while q-max / q-min is 4: the slow clients cannot be given few enough steps
  // to arrive with the fast ones, so they form their own groups and the fast groups go on.
  auto server = StartServer(30, "server.log",
                            {"--mode", "semiasync", "--q-min", "5", "--q-max", "20", "--max-staleness", "1000"});
  const std::vector<RoundRecord> rounds = RunSixClientsTwoSlow(*server, 30);
  size_t grouped = 0;  // versions that merged a group of more than one update
  for (const auto& r : rounds) grouped += r.merged.size() > 1 && r.merged[0].group != 0;
  EXPECT_GE(grouped, 1u);
  nlohmann::json s = Summary();
  EXPECT_EQ(s["mode"], "semiasync");
  EXPECT_EQ(s["model_version"], 30);
}

// ε after `releases` versions at q = 2/10, noise 1, δ = 1e-5, as `plexus privacy` computes it.
double PrivacyEpsilon(int releases) {
  std::string out;
  EXPECT_EQ(testing::RunToCompletion(
                PLEXUS_BINARY,
                {"privacy", "--q", "0.2", "--noise", "1", "--releases", std::to_string(releases), "--json"}, &out),
            0)
      << out;
  const size_t brace = out.find('{');
  if (brace == std::string::npos) return -1;
  return nlohmann::json::parse(out.substr(brace))["epsilon"].get<double>();
}

// Central DP over gRPC: --dp-budget ends the federation at the last version within it and says
// why; a restart continues the accounting from the store (ε after it is the ε of every version
// published, not of those since the restart), and a restart that would change the mechanism, or
// drop DP, is refused.
TEST_F(FederationTest, CentralDpStopsAtTheBudgetAndARestartContinuesTheAccounting) {
  clients_per_round_ = 2;
  const double e2 = PrivacyEpsilon(2), e3 = PrivacyEpsilon(3), e4 = PrivacyEpsilon(4), e5 = PrivacyEpsilon(5);
  ASSERT_LT(e2, e3);
  ASSERT_LT(e4, e5);
  const std::vector<std::string> dp{"--dp", "central:clip=2,noise=1", "--dp-population", "10"};
  auto with_budget = [&](double budget) {
    std::vector<std::string> args = dp;
    args.push_back("--dp-budget");
    args.push_back(std::to_string(budget));
    return args;
  };
  {
    auto server = StartServer(6, "server1.log", with_budget((e2 + e3) / 2));
    auto clients = StartClients(2);
    ASSERT_EQ(server->Wait(240000), 0) << server->Log();
    for (auto& c : clients) EXPECT_EQ(c->Wait(30000), 0) << c->Log();
    EXPECT_NE(server->Log().find("stopped at --dp-budget"), std::string::npos) << server->Log();
    const nlohmann::json s = Summary();
    EXPECT_EQ(s["model_version"], 2);
    EXPECT_TRUE(s["dp_stopped_by_budget"].get<bool>());
    EXPECT_EQ(s["dp_budget_releases"], 2);
    EXPECT_NEAR(s["dp_epsilon"].get<double>(), e2, 1e-9 * e2);
    EXPECT_EQ(s["dp_noise_source"], "openssl");
    EXPECT_NE(s["strategy"].get<std::string>().find("dp_fedavg(clip=2,noise=1,expected=2"), std::string::npos) << s;
  }
  std::string out;
  std::vector<std::string> changed{
      "server", "--listen", address_, "--db", db_, "--dp", "central:clip=2,noise=0.5", "--dp-population", "10"};
  EXPECT_EQ(testing::RunToCompletion(PLEXUS_BINARY, changed, &out, 60000), 1) << out;
  EXPECT_NE(out.find("started with --dp central:clip=2,noise=1"), std::string::npos) << out;
  EXPECT_EQ(testing::RunToCompletion(PLEXUS_BINARY, {"server", "--listen", address_, "--db", db_}, &out, 60000), 1)
      << out;
  EXPECT_NE(out.find("restart it with the same --dp"), std::string::npos) << out;

  auto restarted = StartServer(6, "server2.log", with_budget((e4 + e5) / 2));
  auto clients = StartClients(2);
  ASSERT_EQ(restarted->Wait(240000), 0) << restarted->Log();
  for (auto& c : clients) EXPECT_EQ(c->Wait(30000), 0) << c->Log();
  EXPECT_NE(restarted->Log().find("the 2 versions published before this start cost epsilon"), std::string::npos)
      << restarted->Log();
  const nlohmann::json s = Summary();
  EXPECT_EQ(s["model_version"], 4);
  EXPECT_NEAR(s["dp_epsilon"].get<double>(), e4, 1e-9 * e4);  // not the 2 versions since the restart
  ASSERT_EQ(s["rounds"].size(), 4u);
  EXPECT_NEAR(s["rounds"][1]["dp_epsilon"].get<double>(), e2, 1e-9 * e2);
}

}  // namespace
}  // namespace plexus
