// Kill-and-restart harness (label `slow`; run it with `ctest -L slow`): a server is killed with
// SIGKILL at random moments over many rounds, at least 20 times, and restarted on the same
// database. After each restart every committed round and checkpoint must still be there, and at
// the end the federation must have completed with no acknowledged update lost: no client ever had
// to upload the same task twice.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "server/store/sqlite_store.h"
#include "tests/integration/process.h"

namespace plexus {
namespace {

using ::plexus::testing::ChildProcess;
using ::plexus::testing::FreePort;

TEST(CrashHarness, TwentyKillsLoseNothing) {
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist")) GTEST_SKIP() << "dataset not installed";
  const auto dir = std::filesystem::temp_directory_path() / ("plexus_crash_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string address = "127.0.0.1:" + std::to_string(FreePort());
  const std::string db = (dir / "s.db").string();
  const int rounds = 40;
  auto start_server = [&](int i) {
    return std::make_unique<ChildProcess>(
        PLEXUS_BINARY,
        std::vector<std::string>{"server", "--listen", address, "--db", db, "--rounds", std::to_string(rounds),
                                 "--clients-per-round", "3", "--min-clients", "3", "--no-eval", "--local-steps", "5",
                                 "--linger-s", "30"},
        (dir / ("server" + std::to_string(i) + ".log")).string());
  };
  std::vector<std::unique_ptr<ChildProcess>> clients;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(std::make_unique<ChildProcess>(
        PLEXUS_BINARY,
        std::vector<std::string>{"client", "--server", address, "--num-partitions", "30", "--partition-index",
                                 std::to_string(i), "--client-id", "c" + std::to_string(i), "--give-up-s", "120"},
        (dir / ("client" + std::to_string(i) + ".log")).string()));
  }
  auto committed = [&]() -> std::pair<size_t, size_t> {
    auto store = SqliteStore::Open(db);
    if (!store.ok()) return {0, 0};
    auto r = (*store)->ListRounds();
    auto v = (*store)->CheckpointVersions();
    return {r.ok() ? r->size() : 0, v.ok() ? v->size() : 0};
  };

  std::mt19937 rng(12345);
  int kills = 0;
  size_t last_rounds = 0;
  std::unique_ptr<ChildProcess> server = start_server(0);
  while (kills < 20) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200 + rng() % 1300));
    if (!server->running()) break;  // finished before enough kills: rounds is too small
    server->Signal(SIGKILL);
    ASSERT_EQ(server->Wait(10000), 128 + SIGKILL);
    ++kills;
    const auto [rounds_now, checkpoints_now] = committed();
    ASSERT_GE(rounds_now, last_rounds) << "a committed round disappeared after kill " << kills;
    // Version 0 exists once the server has initialized the database; after that, each round
    // commits its checkpoint with it.
    if (checkpoints_now > 0 || rounds_now > 0) {
      ASSERT_EQ(checkpoints_now, rounds_now + 1) << "rounds and checkpoints disagree after kill " << kills;
    }
    last_rounds = rounds_now;
    server = start_server(kills);
  }
  EXPECT_EQ(kills, 20) << "the federation finished after " << kills << " kills";
  ASSERT_EQ(server->Wait(300000), 0) << server->Log();
  for (auto& c : clients) ASSERT_EQ(c->Wait(60000), 0) << c->Log();

  auto store = *SqliteStore::Open(db);
  EXPECT_EQ(store->ListRounds()->size(), static_cast<size_t>(rounds));
  EXPECT_EQ(store->CheckpointVersions()->size(), static_cast<size_t>(rounds + 1));
  for (const auto& r : *store->ListRounds()) EXPECT_EQ((*store->Checkpoint(r.model_version)).ContentSha256(), r.model_sha256);

  // An acknowledged update that the server lost would make its client train and upload the same
  // task again.
  std::map<std::string, int> uploads;
  for (auto& c : clients) {
    std::istringstream in(c->Log());
    std::string line;
    while (std::getline(in, line)) {
      const size_t at = line.find("task "), up = line.find(": uploaded");
      if (at != std::string::npos && up != std::string::npos) ++uploads[line.substr(at + 5, up - at - 5)];
    }
  }
  for (const auto& [task, n] : uploads) EXPECT_EQ(n, 1) << "task " << task << " was uploaded " << n << " times";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace plexus
