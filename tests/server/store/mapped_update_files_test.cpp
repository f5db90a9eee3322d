// SqliteStore lending its update files as the memory uploads are decoded into
// (Store::UpdateMemory, server/store/mapped_update_files.h).
#ifdef PLEXUS_HAVE_SQLITE_STORE
#include "server/store/mapped_update_files.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/atomic_file.h"
#include "core/large_block_source.h"
#include "core/safetensors.h"
#include "server/store/sqlite_store.h"
#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

constexpr int64_t kParams = 300000;  // 1.2 MB of values: a large block, its header padded to 4 KiB

// A database in a fresh folder (under `root`, the temporary directory by default), removed with
// everything in it when the test ends.
class ScratchFolder {
 public:
  explicit ScratchFolder(const std::string& name,
                         const std::filesystem::path& root = std::filesystem::temp_directory_path())
      : dir_(root / (name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  ~ScratchFolder() { std::filesystem::remove_all(dir_); }
  std::string db() const { return (dir_ / "s.db").string(); }
  std::string updates_dir() const { return db() + ".updates"; }
  std::vector<std::string> update_files() const {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(updates_dir(), ec)) out.push_back(e.path().filename());
    return out;
  }

 private:
  std::filesystem::path dir_;
};

std::unique_ptr<SqliteStore> OpenMapped(const std::string& db) {
  auto s = *SqliteStore::Open(db, SqliteStore::Access::kExclusive);
  s->SetUpdateFileMapping(SqliteStore::UpdateFileMapping::kAlways);
  EXPECT_NE(s->UpdateMemory(), nullptr);  // the pool is made when first asked for
  return s;
}

// A store in a scratch folder that lends its update files, with their pool.
struct MappedStore {
  explicit MappedStore(const std::string& name)
      : dir(name), s(OpenMapped(dir.db())), pool(s->MappedUpdateFilesForTest()) {}
  ScratchFolder dir;
  std::unique_ptr<SqliteStore> s;
  std::shared_ptr<MappedUpdateFiles> pool;
};

// An update whose values say which it is, decoded (allocated and written) where `memory` lends.
Update DecodedUpdate(const std::shared_ptr<LargeBlockSource>& memory, const std::string& client, float tag) {
  Update u;
  u.client_id = client;
  u.task_id = "t-" + client;
  u.num_examples = 1;
  const ScopedLargeBlockSource decode_into(memory);
  u.delta = *ModelState::CreateUninitialized({{"w", {kParams}}});
  std::span<float> values = u.delta.data();
  for (size_t i = 0; i < values.size(); ++i) values[i] = tag + static_cast<float>(i % 1000) * 1e-3f;
  return u;
}

// The store's logged updates hold `expected`, in order of their sequence numbers.
void ExpectLoggedValues(SqliteStore* s, const std::vector<const Update*>& expected) {
  Result<std::vector<LoggedUpdate>> back = s->ListLoggedUpdates();
  ASSERT_OK(back);
  ASSERT_EQ(back->size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ((*back)[i].update.delta, expected[i]->delta) << i;
}

RoundRecord MergesLogged(uint64_t version, std::vector<uint64_t> seqs) {
  RoundRecord r;
  r.round = version;
  r.model_version = version;
  r.logged_done = std::move(seqs);
  return r;
}

TEST(MappedUpdateFilesTest, AnUpdateDecodedIntoALentFileIsLoggedInPlace) {
  MappedStore m("plexus_mapped_log");
  ASSERT_NE(m.pool, nullptr);
  auto& [dir, s, pool] = m;
  std::shared_ptr<LargeBlockSource> memory = s->UpdateMemory();
  Update u = DecodedUpdate(memory, "a", 1.0f);
  EXPECT_EQ(pool->counts().lent, 1u);
  ASSERT_OK(s->LogUpdate(1, u));
  EXPECT_EQ(pool->counts().logged, 1u);
  // The row names the file the update was decoded into: one file, which reads back as the update,
  // and whose values are the update's memory (a write to one is seen in the other).
  const std::vector<std::string> files = dir.update_files();
  ASSERT_EQ(files.size(), 1u);
  const std::string path = dir.updates_dir() + "/" + files[0];
  EXPECT_EQ(*ReadSafetensorsFile(path), u.delta);
  EXPECT_EQ(std::filesystem::file_size(path), MappedUpdateFiles::kValuesOffset + kParams * sizeof(float));
  ModelState expected = u.delta;
  u.delta.data()[7] = -42.0f;
  EXPECT_EQ((*ReadSafetensorsFile(path)).data()[7], -42.0f);
  u.delta.data()[7] = expected.data()[7];
  // Another process reading the database finds it.
  auto reader = *SqliteStore::Open(dir.db());
  std::vector<LoggedUpdate> back = *reader->ListLoggedUpdates();
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].update.delta, expected);
}

TEST(MappedUpdateFilesTest, AFileIsReusedOnlyOnceItsRowIsGoneAndItsUpdateFreed) {
  MappedStore m("plexus_mapped_reuse");
  ASSERT_NE(m.pool, nullptr);
  auto& [dir, s, pool] = m;
  ASSERT_OK(s->PutCheckpoint(*ModelState::Create({{"w", {kParams}}})));
  // First the row goes, then the update: the file waits for both.
  std::optional<Update> a = DecodedUpdate(s->UpdateMemory(), "a", 1.0f);
  const float* a_values = a->delta.data().data();
  ASSERT_OK(s->LogUpdate(1, *a));
  ASSERT_OK(s->CommitRound(MergesLogged(1, {1}), *ModelState::Create({{"w", {kParams}}}, 1), ""));
  EXPECT_EQ(pool->counts().lent, 1u);
  EXPECT_EQ(pool->counts().logged, 0u);
  EXPECT_EQ(pool->counts().spare, 0u);
  EXPECT_TRUE(s->SpareUpdateFiles().empty());  // not among the copied files' spares either
  // Still lent: the next update gets a file of its own.
  Update b = DecodedUpdate(s->UpdateMemory(), "b", 2.0f);
  EXPECT_NE(b.delta.data().data(), a_values);
  a.reset();
  EXPECT_EQ(pool->counts().spare, 1u);
  // Then the update goes first, then the row.
  ASSERT_OK(s->LogUpdate(2, b));
  const float* b_values = b.delta.data().data();
  b = Update();
  EXPECT_EQ(pool->counts().logged, 1u);
  EXPECT_EQ(pool->counts().spare, 1u);
  Update c = DecodedUpdate(s->UpdateMemory(), "c", 3.0f);  // the spare, a's file
  EXPECT_EQ(c.delta.data().data(), a_values);
  ASSERT_OK(s->CommitRound(MergesLogged(2, {2}), *ModelState::Create({{"w", {kParams}}}, 2), ""));
  EXPECT_EQ(pool->counts().spare, 1u);
  Update d = DecodedUpdate(s->UpdateMemory(), "d", 4.0f);  // b's file
  EXPECT_EQ(d.delta.data().data(), b_values);
  EXPECT_EQ(dir.update_files().size(), 2u);  // two files served four updates
  // Reused files read back as their new updates.
  ASSERT_OK(s->LogUpdate(3, c));
  ASSERT_OK(s->LogUpdate(4, d));
  ExpectLoggedValues(s.get(), {&c, &d});
}

TEST(MappedUpdateFilesTest, OtherUpdatesAreCopiedIntoFilesOfTheirOwn) {
  MappedStore m("plexus_mapped_copies");
  ASSERT_NE(m.pool, nullptr);
  auto& [dir, s, pool] = m;
  Update lent = DecodedUpdate(s->UpdateMemory(), "a", 1.0f);
  Update heap = DecodedUpdate(nullptr, "b", 2.0f);
  ASSERT_OK(s->LogUpdate(1, lent));
  ASSERT_OK(s->LogUpdate(2, heap));
  ASSERT_OK(s->LogUpdate(3, lent));  // logged twice: the second row gets a copy
  EXPECT_EQ(pool->counts().logged, 1u);
  EXPECT_EQ(dir.update_files().size(), 3u);
  ExpectLoggedValues(s.get(), {&lent, &heap, &lent});
}

TEST(MappedUpdateFilesTest, ASyncRoundsReplacedUpdateGivesItsFileBack) {
  MappedStore m("plexus_mapped_sync");
  ASSERT_NE(m.pool, nullptr);
  auto& [dir, s, pool] = m;
  ASSERT_OK(s->PutOpenRound({1, 0, {{"a", "t-a"}}}));
  std::optional<Update> first = DecodedUpdate(s->UpdateMemory(), "a", 1.0f);
  ASSERT_OK(s->PutAcceptedUpdate(1, 0, *first));
  first.reset();
  Update second = DecodedUpdate(s->UpdateMemory(), "a", 2.0f);
  ASSERT_OK(s->PutAcceptedUpdate(1, 0, second));  // replaces the first
  EXPECT_EQ(pool->counts().logged, 1u);
  EXPECT_EQ(pool->counts().spare, 1u);
  std::vector<Update> accepted = *s->ListAcceptedUpdates(1, 0);
  ASSERT_EQ(accepted.size(), 1u);
  EXPECT_EQ(accepted[0].delta, second.delta);
  ASSERT_OK(s->PutOpenRound({1, 1, {{"a", "t-a"}}}));  // a new attempt drops the old one's rows
  EXPECT_EQ(pool->counts().logged, 0u);
}

TEST(MappedUpdateFilesTest, OnByDefaultOnlyWhereTheFolderIsInMemory) {
  ScratchFolder dir("plexus_mapped_default");
  auto never = *SqliteStore::Open(dir.db());
  never->SetUpdateFileMapping(SqliteStore::UpdateFileMapping::kNever);
  EXPECT_EQ(never->UpdateMemory(), nullptr);
  never.reset();
  auto by_default = *SqliteStore::Open(dir.db());
  std::shared_ptr<LargeBlockSource> memory = by_default->UpdateMemory();
  EXPECT_EQ(memory != nullptr, OnInMemoryFileSystem(dir.updates_dir())) << dir.updates_dir();
  auto in_memory = *SqliteStore::Open(":memory:");  // no updates folder
  EXPECT_EQ(in_memory->UpdateMemory(), nullptr);
  if (!std::filesystem::is_directory("/dev/shm") || !OnInMemoryFileSystem("/dev/shm")) {
    GTEST_SKIP() << "no tmpfs at /dev/shm to see the default turn the mapping on";
  }
  ScratchFolder shm("plexus_mapped_default", "/dev/shm");
  auto on_tmpfs = *SqliteStore::Open(shm.db());
  EXPECT_NE(on_tmpfs->UpdateMemory(), nullptr);
}

// A process that logs updates decoded into lent files, reporting each acknowledged one, is killed
// at a random moment (mid-decode, mid-log, between commits); every acknowledged update must be
// there after a restart, with its own values (files are reused: a stale file would show).
TEST(MappedUpdateFilesTest, AKilledLoggerLosesNoAcknowledgedUpdate) {
  for (int run = 0; run < 5; ++run) {
    ScratchFolder dir("plexus_mapped_kill");
    int acks[2];
    ASSERT_EQ(::pipe(acks), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(acks[0]);
      auto s = OpenMapped(dir.db());
      if (!s->PutCheckpoint(*ModelState::Create({{"w", {kParams}}})).ok()) ::_exit(3);
      for (uint64_t seq = 1;; ++seq) {
        Update u = DecodedUpdate(s->UpdateMemory(), "c" + std::to_string(seq), static_cast<float>(seq));
        if (!s->LogUpdate(seq, u).ok()) ::_exit(4);
        if (::write(acks[1], &seq, sizeof seq) != sizeof seq) ::_exit(5);
        if (seq % 4 == 0) {  // merge the oldest two, so that their files are reused
          RoundRecord r = MergesLogged(seq / 4, {seq - 3, seq - 2});
          if (!s->CommitRound(r, *ModelState::Create({{"w", {kParams}}}, seq / 4), "").ok()) ::_exit(6);
        }
      }
    }
    ::close(acks[1]);
    std::vector<uint64_t> acknowledged;
    uint64_t seq = 0;
    const size_t kill_after = 6 + static_cast<size_t>(run) * 5;
    while (acknowledged.size() < kill_after && ::read(acks[0], &seq, sizeof seq) == sizeof seq) {
      acknowledged.push_back(seq);
    }
    ::kill(child, SIGKILL);
    while (::read(acks[0], &seq, sizeof seq) == sizeof seq) acknowledged.push_back(seq);  // sent before it died
    ::close(acks[0]);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the logger stopped on its own: exit " << WEXITSTATUS(status);
    ASSERT_GE(acknowledged.size(), kill_after);
    auto s = *SqliteStore::Open(dir.db(), SqliteStore::Access::kExclusive);
    Result<std::vector<LoggedUpdate>> back = s->ListLoggedUpdates();
    ASSERT_OK(back);
    size_t lost = 0;
    for (uint64_t acked : acknowledged) {
      if (acked % 4 == 1 || acked % 4 == 2) {
        // Merged by the commit after seq + 2 or seq + 3 when that came; else still logged.
        const uint64_t merged_by = acked + (acked % 4 == 1 ? 3 : 2);
        if (merged_by <= acknowledged.back()) continue;
      }
      const Update expected = DecodedUpdate(nullptr, "c" + std::to_string(acked), static_cast<float>(acked));
      bool found = false;
      for (const LoggedUpdate& l : *back) found = found || (l.seq == acked && l.update.delta == expected.delta);
      lost += found ? 0 : 1;
    }
    EXPECT_EQ(lost, 0u) << "run " << run << ": " << acknowledged.size() << " acknowledged";
  }
}

}  // namespace
}  // namespace plexus
#endif  // PLEXUS_HAVE_SQLITE_STORE
