// Kill-and-restart harness (label `slow`, 20 kills; `crash_harness_quick` runs it with 5 under
// `integration`): a server is killed with SIGKILL at random moments over many rounds, and restarted on the same
// database. After each restart every committed round and checkpoint must still be there, and at
// the end the federation must have completed with no acknowledged update lost: no client ever had
// to upload the same task twice. The async and semi-async variants check that every update a
// client saw acknowledged is in a committed version at the end (the server logs each before
// acknowledging it and folds the log again at a restart).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "core/atomic_file.h"
#include "server/store/sqlite_store.h"
#include "tests/integration/process.h"

namespace plexus {
namespace {

using ::plexus::testing::ChildProcess;
using ::plexus::testing::FreePort;

// How many kills a run makes: 20, or PLEXUS_CRASH_KILLS (the `integration` label's quick run of
// this harness in the README's test command uses 5; the full 20 run under `slow`).
int KillCount() {
  const char* env = std::getenv("PLEXUS_CRASH_KILLS");
  const int n = env ? std::atoi(env) : 20;
  return n > 0 ? n : 20;
}

size_t Occurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// The rounds a run needs so that the federation outlasts its kills (`rounds_for_20` with 20).
int RoundsFor(int rounds_for_20) { return std::max(10, rounds_for_20 * KillCount() / 20); }

// Tasks whose upload a client logged as acknowledged ("task T: uploaded ..."), with how often.
std::map<std::string, int> AcknowledgedUploads(const std::vector<std::string>& logs) {
  std::map<std::string, int> uploads;
  for (const std::string& log : logs) {
    std::istringstream in(log);
    std::string line;
    while (std::getline(in, line)) {
      const size_t at = line.find("task "), up = line.find(": uploaded");
      if (at != std::string::npos && up != std::string::npos && at < up) ++uploads[line.substr(at + 5, up - at - 5)];
    }
  }
  return uploads;
}

// Kills and restarts the server KillCount() times while three clients train, then lets it finish
// `rounds` versions; with `mode_flags` for the server. With `clients_must_finish`, every client must end
// cleanly (an asynchronous federation may finish before a client that kept missing the restarts
// ever joined: such clients are stopped instead). The database lies in a fresh folder under
// `root` (default: the temporary directory). Returns the clients' logs.
std::vector<std::string> RunTwentyKills(const std::string& name, int rounds, const std::vector<std::string>& mode_flags,
                                        bool clients_must_finish, std::string* db_out = nullptr,
                                        const std::filesystem::path& root = std::filesystem::temp_directory_path()) {
  const auto dir = root / ("plexus_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string address = "127.0.0.1:" + std::to_string(FreePort());
  const std::string db = (dir / "s.db").string();
  auto start_server = [&](int i) {
    std::vector<std::string> args = {"server",
                                     "--listen",
                                     address,
                                     "--db",
                                     db,
                                     "--rounds",
                                     std::to_string(rounds),
                                     "--no-eval",
                                     "--local-steps",
                                     "5",
                                     "--linger-s",
                                     "30",
                                     "--keep-checkpoints",
                                     "0"};  // every version is checked at the end
    args.insert(args.end(), mode_flags.begin(), mode_flags.end());
    return std::make_unique<ChildProcess>(PLEXUS_BINARY, args,
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
  const int kills_wanted = KillCount();
  while (kills < kills_wanted) {
    // Each server lives for a random number of published versions (0 to 2), then a random part
    // of the next one: kills land at every stage of a round however fast rounds run (a restarted
    // server is up in tens of milliseconds; fixed sleeps of 0.2-1.5 s once let the federation
    // finish before its kills).
    const size_t versions_this_life = rng() % 3;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (server->running() && Occurrences(server->Log(), " closed") < versions_this_life &&
           std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 60));
    if (!server->running()) break;  // finished before enough kills: rounds is too small
    server->Signal(SIGKILL);
    EXPECT_EQ(server->Wait(10000), 128 + SIGKILL);
    ++kills;
    const auto [rounds_now, checkpoints_now] = committed();
    EXPECT_GE(rounds_now, last_rounds) << "a committed round disappeared after kill " << kills;
    // Version 0 exists once the server has initialized the database; after that, each round
    // commits its checkpoint with it.
    if (checkpoints_now > 0 || rounds_now > 0) {
      EXPECT_EQ(checkpoints_now, rounds_now + 1) << "rounds and checkpoints disagree after kill " << kills;
    }
    last_rounds = rounds_now;
    server = start_server(kills);
  }
  EXPECT_EQ(kills, kills_wanted) << "the federation finished after " << kills << " kills";
  EXPECT_EQ(server->Wait(300000), 0) << server->Log();
  std::vector<std::string> logs;
  for (auto& c : clients) {
    if (clients_must_finish) {
      EXPECT_EQ(c->Wait(60000), 0) << c->Log();
    } else if (c->running()) {
      c->Signal(SIGKILL);
      c->Wait(10000);
    }
    logs.push_back(c->Log());
  }

  auto store = *SqliteStore::Open(db);
  EXPECT_EQ(store->ListRounds()->size(), static_cast<size_t>(rounds));
  EXPECT_EQ(store->CheckpointVersions()->size(), static_cast<size_t>(rounds + 1));
  for (const auto& r : *store->ListRounds())
    EXPECT_EQ((*store->Checkpoint(r.model_version)).ContentSha256(), r.model_sha256);
  store.reset();
  if (db_out) {
    *db_out = db;  // the caller reads it, then removes the folder
  } else if (!::testing::Test::HasFailure()) {
    std::filesystem::remove_all(dir);
  }
  return logs;
}

// Sync rounds of three clients with `strategy`: every acknowledged upload is merged exactly once.
void ExpectSyncKillsLoseNothing(const std::string& name, const std::string& strategy) {
  // At most 3 versions per server life (RunTwentyKills): 80 outlast 20 kills.
  const int rounds = RoundsFor(80);
  const std::vector<std::string> logs =
      RunTwentyKills(name, rounds, {"--clients-per-round", "3", "--min-clients", "3", "--strategy", strategy},
                     /*clients_must_finish=*/true);
  // An acknowledged update that the server lost would make its client train and upload the same
  // task again.
  const std::map<std::string, int> uploads = AcknowledgedUploads(logs);
  // Every round merged three acknowledged uploads: fewer parsed means the count checks nothing
  // (a changed log line), not that nothing was lost.
  ASSERT_GE(uploads.size(), static_cast<size_t>(3 * rounds)) << "the harness observed too few acknowledged uploads";
  for (const auto& [task, n] : uploads) EXPECT_EQ(n, 1) << "task " << task << " was uploaded " << n << " times";
}

TEST(CrashHarness, TwentyKillsLoseNothing) {
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist")) GTEST_SKIP() << "dataset not installed";
  ExpectSyncKillsLoseNothing("crash_sync", "fedavg");
}

// FedAdam's moments (16 bytes per parameter) are a file next to the checkpoints, written over the
// one the committed row does not name: every restart reads the committed one back, and a torn or
// mismatched file would stop the server at start (the harness then fails on the kill count).
TEST(CrashHarness, TwentyKillsWithServerMomentsLoseNothing) {
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist")) GTEST_SKIP() << "dataset not installed";
  ExpectSyncKillsLoseNothing("crash_sync_fedadam", "fedadam");
}

// Asynchronous modes: an update the server acknowledged must be in a committed version at the
// end (the server logs it before acknowledging; a restart folds the log again). Counts the
// acknowledged uploads the clients logged that no version merged, and asserts zero.
void ExpectNoAcknowledgedUpdateLost(const std::string& name, int rounds, const std::vector<std::string>& mode_flags,
                                    const std::filesystem::path& root = std::filesystem::temp_directory_path()) {
  std::string db;
  const std::vector<std::string> logs =
      RunTwentyKills(name, rounds, mode_flags, /*clients_must_finish=*/false, &db, root);
  const std::map<std::string, int> acknowledged = AcknowledgedUploads(logs);
  // Versions are built from acknowledged uploads: the harness must have seen them.
  ASSERT_GT(acknowledged.size(), 0u) << "the harness observed no acknowledged upload";
  auto store = *SqliteStore::Open(db);
  std::set<std::string> merged;
  for (const RoundRecord& r : *store->ListRounds()) {
    for (const MergedUpdate& m : r.merged) merged.insert(m.task_id);
  }
  size_t lost = 0;
  for (const auto& [task, n] : acknowledged) {
    if (!merged.count(task)) {
      ++lost;
      ADD_FAILURE() << "task " << task << " was acknowledged but is in no committed version";
    }
  }
  EXPECT_EQ(lost, 0u) << "of " << acknowledged.size() << " acknowledged updates";
  store.reset();
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(std::filesystem::path(db).parent_path());
}

TEST(CrashHarness, TwentyKillsInAsyncModeLoseNoAcknowledgedUpdate) {
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist")) GTEST_SKIP() << "dataset not installed";
  ExpectNoAcknowledgedUpdateLost("crash_async", RoundsFor(400),
                                 {"--mode", "async", "--buffer-size", "4", "--max-staleness", "1000"});
}

// int8 uploads into FedBuff's averaging are logged as their codes (a quarter of float32's bytes)
// and folded again from them after each restart.
TEST(CrashHarness, TwentyKillsInAsyncModeWithInt8UploadsLoseNoAcknowledgedUpdate) {
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist")) GTEST_SKIP() << "dataset not installed";
  ExpectNoAcknowledgedUpdateLost(
      "crash_async_int8", RoundsFor(400),
      {"--mode", "async", "--buffer-size", "4", "--max-staleness", "1000", "--upload-codec", "int8"});
}

// With the database on tmpfs the server decodes each upload into a file of its updates folder
// and logs it by writing only its header (server/store/mapped_update_files.h); the CNN's updates
// (1.7 MB) are large enough to be decoded so. Like the others this counts updates by their tasks;
// that each logged file still holds its own update's values after a kill (files are reused) is
// MappedUpdateFilesTest.AKilledLoggerLosesNoAcknowledgedUpdate's to check.
TEST(CrashHarness, TwentyKillsInAsyncModeOnTmpfsLoseNoAcknowledgedUpdateDecodedIntoItsFile) {
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist")) GTEST_SKIP() << "dataset not installed";
  if (!OnInMemoryFileSystem("/dev/shm")) GTEST_SKIP() << "no tmpfs at /dev/shm";
  // Every version's checkpoint is kept (1.7 MB each), and the folder's files besides.
  struct statvfs fs {};
  if (::statvfs("/dev/shm", &fs) != 0 || fs.f_bavail * fs.f_frsize < (uint64_t{1} << 30)) {
    GTEST_SKIP() << "less than 1 GiB free on /dev/shm";
  }
  ExpectNoAcknowledgedUpdateLost("crash_async_tmpfs", RoundsFor(200),
                                 {"--mode", "async", "--buffer-size", "4", "--max-staleness", "1000", "--model", "cnn"},
                                 "/dev/shm");
}

TEST(CrashHarness, TwentyKillsInSemiAsyncModeLoseNoAcknowledgedUpdate) {
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist")) GTEST_SKIP() << "dataset not installed";
  ExpectNoAcknowledgedUpdateLost("crash_semiasync", RoundsFor(200), {"--mode", "semiasync", "--max-staleness", "1000"});
}

}  // namespace
}  // namespace plexus
