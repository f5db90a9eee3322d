// One suite, run against every Store implementation.
#include <filesystem>
#include <functional>
#include <memory>

#include "server/store/memory_store.h"
#include "tests/testing/raw_coded_delta.h"
#include "tests/testing/status_matchers.h"
#ifdef PLEXUS_HAVE_SQLITE_STORE
#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <thread>

#include "core/atomic_file.h"
#include "core/safetensors.h"
#include "server/store/sqlite_store.h"
#endif

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

struct StoreFactory {
  std::string name;
  std::function<std::unique_ptr<Store>(const std::string& path)> open;
};

class StoreConformanceTest : public ::testing::TestWithParam<StoreFactory> {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() /
             ("plexus_store_" + GetParam().name + "_" + std::to_string(::getpid()) + ".db"))
                .string();
    Remove();
    store_ = GetParam().open(path_);
    ASSERT_NE(store_, nullptr);
  }
  void TearDown() override {
    store_.reset();
    Remove();
  }
  void Remove() {
    for (const char* suffix : {"", "-wal", "-shm", ".checkpoints", ".updates"})
      std::filesystem::remove_all(path_ + suffix);
  }

  static ModelState Model(uint64_t version, float fill) {
    ModelState m = *ModelState::Create({{"w", {4}}}, version);
    for (float& x : m.data()) x = fill;
    return m;
  }

  std::string path_;
  std::unique_ptr<Store> store_;
};

TEST_P(StoreConformanceTest, MetaAndClients) {
  EXPECT_THAT(store_->GetMeta("model"), StatusIs(StatusCode::kNotFound, "model"));
  ASSERT_OK(store_->PutMeta("model", "mlp"));
  ASSERT_OK(store_->PutMeta("model", "cnn"));
  EXPECT_EQ(*store_->GetMeta("model"), "cnn");
  ASSERT_OK(store_->PutClient({"b", 10, "x86"}));
  ASSERT_OK(store_->PutClient({"a", 5, "arm"}));
  ASSERT_OK(store_->PutClient({"a", 6, "arm"}));
  auto clients = *store_->ListClients();
  ASSERT_EQ(clients.size(), 2u);
  EXPECT_EQ(clients[0].id, "a");
  EXPECT_EQ(clients[0].num_examples, 6);
}

TEST_P(StoreConformanceTest, CheckpointsAndRounds) {
  EXPECT_FALSE(store_->LatestCheckpoint()->has_value());
  ASSERT_OK(store_->PutCheckpoint(Model(0, 0.0f)));
  ASSERT_OK(store_->PutCheckpoint(Model(0, 0.0f)));  // same content: idempotent
  EXPECT_THAT(store_->PutCheckpoint(Model(0, 1.0f)), StatusIs(StatusCode::kAlreadyExists, "version 0"));

  RoundRecord r;
  r.round = 1;
  r.model_version = 1;
  r.num_selected = 4;
  r.num_updates = 3;
  r.num_dropped = 1;
  r.num_refused = 1;
  ASSERT_OK(store_->CommitRound(r, Model(1, 2.0f), ""));
  EXPECT_THAT(store_->CommitRound(r, Model(1, 2.0f), ""), StatusIs(StatusCode::kAlreadyExists, "round 1"));
  r.round = 2;
  EXPECT_THAT(store_->CommitRound(r, Model(5, 2.0f), ""), StatusIs(StatusCode::kInvalidArgument, "version"));
  ASSERT_OK(store_->SetRoundEvaluation(1, 0.8, 0.5));
  EXPECT_THAT(store_->SetRoundEvaluation(9, 0.8, 0.5), StatusIs(StatusCode::kNotFound, "round 9"));
  EXPECT_FALSE(store_->ListRounds()->at(0).federated_accuracy.has_value());
  RoundRecord federated;
  federated.model_version = 1;
  federated.federated_accuracy = 0.6;
  federated.federated_loss = 0.9;
  federated.federated_examples = 50;
  federated.federated_clients = 2;
  ASSERT_OK(store_->SetFederatedEvaluation(federated));
  federated.federated_accuracy = 0.7;  // a later evaluation of the same version replaces it
  ASSERT_OK(store_->SetFederatedEvaluation(federated));
  federated.model_version = 9;
  EXPECT_THAT(store_->SetFederatedEvaluation(federated), StatusIs(StatusCode::kNotFound, "version 9"));

  auto rounds = *store_->ListRounds();
  ASSERT_EQ(rounds.size(), 1u);
  EXPECT_EQ(rounds[0].num_dropped, 1);
  EXPECT_EQ(rounds[0].num_refused, 1);
  EXPECT_DOUBLE_EQ(*rounds[0].test_accuracy, 0.8);
  EXPECT_DOUBLE_EQ(*rounds[0].federated_accuracy, 0.7);
  EXPECT_DOUBLE_EQ(*rounds[0].federated_loss, 0.9);
  EXPECT_EQ(rounds[0].federated_examples, 50);
  EXPECT_EQ(rounds[0].federated_clients, 2);
  auto latest = *store_->LatestCheckpoint();
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(*latest, Model(1, 2.0f));
  EXPECT_EQ(*store_->Checkpoint(0), Model(0, 0.0f));
  EXPECT_THAT(store_->Checkpoint(7), StatusIs(StatusCode::kNotFound, "version 7"));
  EXPECT_EQ(*store_->CheckpointVersions(), (std::vector<uint64_t>{0, 1}));
}

TEST_P(StoreConformanceTest, StrategyStateIsCommittedWithItsRound) {
  EXPECT_EQ(*store_->AggregatorState(), "");
  ASSERT_OK(store_->PutCheckpoint(Model(0, 0.0f)));
  RoundRecord r;
  r.round = 1;
  r.model_version = 1;
  const std::string state("moments\0\x01\xff", 10);  // binary, with a NUL inside
  ASSERT_OK(store_->CommitRound(r, Model(1, 1.0f), state));
  EXPECT_EQ(*store_->AggregatorState(), state);
  EXPECT_FALSE(store_->CommitRound(r, Model(1, 1.0f), "other").ok());  // refused: nothing changes
  EXPECT_EQ(*store_->AggregatorState(), state);
  r.round = 2;
  r.model_version = 2;
  ASSERT_OK(store_->CommitRound(r, Model(2, 2.0f), ""));  // a stateless step replaces it
  EXPECT_EQ(*store_->AggregatorState(), "");
}

// A server optimizer's moments: 16 bytes per parameter, megabytes for a small model.
TEST_P(StoreConformanceTest, LargeStrategyStatesAreCommittedWithTheirRounds) {
  ASSERT_OK(store_->PutCheckpoint(Model(0, 0.0f)));
  RoundRecord r;
  std::string state(size_t{1} << 20, '\0');
  for (uint64_t round = 1; round <= 3; ++round) {
    for (size_t i = 0; i < state.size(); ++i) state[i] = static_cast<char>((i * 31 + round) & 0xff);
    r.round = static_cast<int64_t>(round);
    r.model_version = round;
    ASSERT_OK(store_->CommitRound(r, Model(round, 1.0f), state));
    EXPECT_EQ(*store_->AggregatorState(), state) << round;
  }
  const std::string refused(state.size(), 'x');
  EXPECT_FALSE(store_->CommitRound(r, Model(3, 1.0f), refused).ok());  // version 3 again: nothing changes
  EXPECT_EQ(*store_->AggregatorState(), state);
  r.round = 4;
  r.model_version = 4;
  ASSERT_OK(store_->CommitRound(r, Model(4, 1.0f), "small"));
  EXPECT_EQ(*store_->AggregatorState(), "small");
}

TEST_P(StoreConformanceTest, MergedUpdatesTravelWithTheirRound) {
  ASSERT_OK(store_->PutCheckpoint(Model(0, 0.0f)));
  RoundRecord r;
  r.round = 1;
  r.model_version = 1;
  r.merged = {{"b", "t-b", 0, 3, 12.5}, {"a", "t-a", 2, 3, std::nullopt, std::string(64, 'f')}};
  ASSERT_OK(store_->CommitRound(r, Model(1, 1.0f), ""));
  r.round = 2;
  r.model_version = 2;
  r.merged = {};
  ASSERT_OK(store_->CommitRound(r, Model(2, 2.0f), ""));
  r.round = 3;
  r.model_version = 3;
  r.merged = {{"c", "t-c", 1, 0, std::nullopt}};
  ASSERT_OK(store_->CommitRound(r, Model(3, 3.0f), ""));
  auto rounds = *store_->ListRounds();
  ASSERT_EQ(rounds.size(), 3u);
  EXPECT_EQ(rounds[0].merged, (std::vector<MergedUpdate>{{"b", "t-b", 0, 3, 12.5},
                                                         {"a", "t-a", 2, 3, std::nullopt, std::string(64, 'f')}}))
      << "an edge's hash of a client update is kept";
  EXPECT_TRUE(rounds[1].merged.empty());
  EXPECT_EQ(rounds[2].merged, (std::vector<MergedUpdate>{{"c", "t-c", 1, 0, std::nullopt}}));
}

TEST_P(StoreConformanceTest, OpenRoundAndAcceptedUpdates) {
  EXPECT_FALSE(store_->GetOpenRound()->has_value());
  Update u;
  u.client_id = "b";
  u.task_id = "r1a0-b";
  u.num_examples = 7;
  u.metrics["train_loss"] = 0.5;
  u.delta = Model(0, 3.0f);
  EXPECT_THAT(store_->PutAcceptedUpdate(1, 0, u), StatusIs(StatusCode::kFailedPrecondition, "not the open round"));
  ASSERT_OK(store_->PutOpenRound({1, 0, {{"a", "r1a0-a"}, {"b", "r1a0-b"}}}));
  ASSERT_OK(store_->PutAcceptedUpdate(1, 0, u));
  auto open = *store_->GetOpenRound();
  ASSERT_TRUE(open.has_value());
  EXPECT_EQ(open->tasks.size(), 2u);
  auto accepted = *store_->ListAcceptedUpdates(1, 0);
  ASSERT_EQ(accepted.size(), 1u);
  EXPECT_EQ(accepted[0].num_examples, 7);
  EXPECT_DOUBLE_EQ(accepted[0].metrics["train_loss"], 0.5);
  EXPECT_EQ(accepted[0].delta.data()[2], 3.0f);
  // A new attempt forgets the old attempt's updates; committing the round forgets everything.
  ASSERT_OK(store_->PutOpenRound({1, 1, {{"a", "r1a1-a"}}}));
  EXPECT_TRUE(store_->ListAcceptedUpdates(1, 0)->empty());
  ASSERT_OK(store_->PutAcceptedUpdate(1, 1, u));
  ASSERT_OK(store_->PutCheckpoint(Model(0, 0.0f)));
  RoundRecord r;
  r.round = 1;
  r.model_version = 1;
  ASSERT_OK(store_->CommitRound(r, Model(1, 1.0f), ""));
  EXPECT_FALSE(store_->GetOpenRound()->has_value());
  EXPECT_TRUE(store_->ListAcceptedUpdates(1, 1)->empty());
}

// Asynchronous modes log each acknowledged update until a committed version names it: the
// sync round's bookkeeping (a new open round, a commit) leaves the other log entries alone.
TEST_P(StoreConformanceTest, UpdateLogKeepsEntriesUntilACommitNamesThem) {
  auto logged = [](const std::string& client, float fill) {
    Update u;
    u.client_id = client;
    u.task_id = "t-" + client;
    u.base_version = 3;
    u.num_examples = 5;
    u.local_steps = 2;
    u.metrics["train_loss"] = 0.25;
    u.metrics["other"] = 1.0;
    u.delta = Model(0, fill);
    return u;
  };
  ASSERT_OK(store_->LogUpdate(7, logged("b", 2.0f)));
  ASSERT_OK(store_->LogUpdate(3, logged("a", 1.0f)));
  ASSERT_OK(store_->LogUpdate(9, logged("a", 4.0f)));
  EXPECT_THAT(store_->LogUpdate(9, logged("a", 5.0f)), StatusIs(StatusCode::kAlreadyExists, "9"));
  std::vector<LoggedUpdate> all = *store_->ListLoggedUpdates();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].seq, 3u);
  EXPECT_EQ(all[1].seq, 7u);
  EXPECT_EQ(all[2].seq, 9u);
  EXPECT_EQ(all[1].update.client_id, "b");
  EXPECT_EQ(all[1].update.task_id, "t-b");
  EXPECT_EQ(all[1].update.base_version, 3u);
  EXPECT_EQ(all[1].update.num_examples, 5);
  EXPECT_EQ(all[1].update.local_steps, 2);
  EXPECT_EQ(all[1].update.metrics.size(), 1u);  // only train_loss is kept
  EXPECT_EQ(all[1].update.delta.data()[0], 2.0f);
  EXPECT_EQ(all[2].update.delta.data()[3], 4.0f);

  ASSERT_OK(store_->PutOpenRound({1, 0, {{"a", "r1a0-a"}}}));
  EXPECT_EQ(store_->ListLoggedUpdates()->size(), 3u);
  ASSERT_OK(store_->PutCheckpoint(Model(0, 0.0f)));
  RoundRecord r;
  r.round = 1;
  r.model_version = 1;
  r.logged_done = {3, 9};
  ASSERT_OK(store_->CommitRound(r, Model(1, 1.0f), ""));
  all = *store_->ListLoggedUpdates();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].seq, 7u);
}

std::vector<StoreFactory> Factories() {
  std::vector<StoreFactory> f = {{"memory", [](const std::string&) { return std::make_unique<MemoryStore>(); }}};
#ifdef PLEXUS_HAVE_SQLITE_STORE
  f.push_back({"sqlite", [](const std::string& path) -> std::unique_ptr<Store> {
                 auto s = SqliteStore::Open(path);
                 return s.ok() ? std::move(s).value() : nullptr;
               }});
#endif
  return f;
}

INSTANTIATE_TEST_SUITE_P(AllStores, StoreConformanceTest, ::testing::ValuesIn(Factories()),
                         [](const auto& info) { return info.param.name; });

#ifdef PLEXUS_HAVE_SQLITE_STORE
ModelState Filled(size_t params, uint64_t version, float fill) {
  ModelState m = *ModelState::Create({{"w", {static_cast<int64_t>(params)}}}, version);
  for (float& x : m.data()) x = fill;
  return m;
}

// A database path in the temporary directory with nothing left of earlier runs; removed again
// (with its WAL and checkpoint folder) when the test ends.
class ScratchDatabase {
 public:
  explicit ScratchDatabase(const std::string& name)
      : path_((std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()) + ".db")).string()) {
    Remove();
  }
  ~ScratchDatabase() { Remove(); }
  const std::string& path() const { return path_; }
  std::string checkpoint_file(uint64_t version) const {
    return path_ + ".checkpoints/v" + std::to_string(version) + ".safetensors";
  }
  std::string updates_dir() const { return path_ + ".updates"; }
  // The files of updates in the folder (without the ones `store`, when given, keeps for reuse),
  // and the spares `store` keeps, each a file of the folder.
  std::vector<std::string> update_files(SqliteStore* store = nullptr) const {
    std::vector<std::string> spares = store ? store->SpareUpdateFiles() : std::vector<std::string>();
    std::vector<std::string> out;
    for (const std::string& name : Files()) {
      if (std::find(spares.begin(), spares.end(), name) == spares.end()) out.push_back(name);
    }
    return out;
  }
  std::vector<std::string> spare_files(SqliteStore* store) const {
    std::vector<std::string> files = Files();
    std::vector<std::string> out;
    for (const std::string& name : store->SpareUpdateFiles()) {
      if (std::find(files.begin(), files.end(), name) != files.end()) out.push_back(name);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  void Remove() {
    for (const char* suffix : {"", "-wal", "-shm", ".checkpoints", ".updates"})
      std::filesystem::remove_all(path_ + suffix);
  }
  std::vector<std::string> Files() const {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(updates_dir(), ec)) {
      out.push_back(e.path().filename().string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  std::string path_;
};

Update AcceptedUpdate(const std::string& client, size_t params, float fill) {
  Update u;
  u.client_id = client;
  u.task_id = "r1a0-" + client;
  u.num_examples = 3;
  u.delta = Filled(params, 0, fill);
  return u;
}

TEST(SqliteStoreTest, CheckpointsAreFilesNextToTheDatabase) {
  ScratchDatabase db("plexus_ckpt_files");
  const ModelState model = Filled(250000, 0, 0.5f);  // 1 MB of values
  {
    auto s = *SqliteStore::Open(db.path());
    ASSERT_OK(s->PutCheckpoint(model));
    ASSERT_OK(s->PutCheckpoint(model));  // the same content again is a no-op
    ModelState other = Filled(250000, 0, 2.0f);
    EXPECT_THAT(s->PutCheckpoint(other), StatusIs(StatusCode::kAlreadyExists, "different content"));
  }
  ASSERT_TRUE(std::filesystem::exists(db.checkpoint_file(0)));
  EXPECT_FALSE(std::filesystem::exists(db.checkpoint_file(0) + ".tmp"));
  EXPECT_EQ(*ReadSafetensorsFile(db.checkpoint_file(0)), model);
  // The database holds the row, not the megabyte.
  EXPECT_LT(std::filesystem::file_size(db.path()) +
                (std::filesystem::exists(db.path() + "-wal") ? std::filesystem::file_size(db.path() + "-wal") : 0),
            model.num_bytes() / 4);
  auto s = *SqliteStore::Open(db.path());
  EXPECT_EQ(**s->LatestCheckpoint(), model);
}

TEST(SqliteStoreTest, AMissingOrAlteredCheckpointFileIsDataLoss) {
  ScratchDatabase db("plexus_ckpt_damaged");
  auto s = *SqliteStore::Open(db.path());
  ASSERT_OK(s->PutCheckpoint(Filled(1000, 0, 1.0f)));
  RoundRecord r;
  r.round = 1;
  r.model_version = 1;
  ASSERT_OK(s->CommitRound(r, Filled(1000, 1, 3.0f), ""));
  {
    // One value changed in place: still a valid safetensors file, but not the model committed.
    std::fstream f(db.checkpoint_file(1), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-4, std::ios::end);
    const float changed = 7.0f;
    f.write(reinterpret_cast<const char*>(&changed), sizeof changed);
  }
  EXPECT_THAT(s->Checkpoint(1), StatusIs(StatusCode::kDataLoss, "does not match its stored SHA-256"));
  std::filesystem::remove(db.checkpoint_file(1));
  EXPECT_THAT(s->LatestCheckpoint(), StatusIs(StatusCode::kDataLoss, "checkpoint 1 is missing"));
  {
    // An edited database cannot point the store at files outside its folder.
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(db.path().c_str(), &raw), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(raw, "UPDATE checkpoints SET file = '../plexus_elsewhere.safetensors' WHERE version = 1",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(raw);
  }
  EXPECT_THAT(s->Checkpoint(1), StatusIs(StatusCode::kDataLoss, "not a file of its folder"));
  EXPECT_EQ((*s->Checkpoint(0)).data()[0], 1.0f);  // the others are untouched
}

TEST(SqliteStoreTest, AFileLeftByACrashBeforeItsCommitIsReplaced) {
  ScratchDatabase db("plexus_ckpt_orphan");
  auto s = *SqliteStore::Open(db.path());
  ASSERT_OK(s->PutCheckpoint(Filled(10, 0, 1.0f)));
  // What a crash between writing version 1's file and committing its row leaves behind.
  ASSERT_OK(WriteSafetensorsFile(db.checkpoint_file(1), Filled(10, 1, 9.0f)));
  EXPECT_THAT(s->Checkpoint(1), StatusIs(StatusCode::kNotFound, "no checkpoint of version 1"));
  EXPECT_EQ((**s->LatestCheckpoint()).version(), 0u);
  RoundRecord r;
  r.round = 1;
  r.model_version = 1;
  ASSERT_OK(s->CommitRound(r, Filled(10, 1, 2.0f), ""));
  EXPECT_EQ((*s->Checkpoint(1)).data()[0], 2.0f);
}

ino_t InodeOf(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

TEST(SqliteStoreTest, APreparedCheckpointsFileIsTheOneItsCommitNames) {
  ScratchDatabase db("plexus_ckpt_prepared");
  auto s = *SqliteStore::Open(db.path());
  ASSERT_OK(s->PutCheckpoint(Filled(1000, 0, 1.0f)));
  const ModelState model = Filled(1000, 1, 3.0f);
  ASSERT_OK(s->PrepareCheckpoint(model));
  // Durable before its row: a file no row names yet.
  ASSERT_TRUE(std::filesystem::exists(db.checkpoint_file(1)));
  EXPECT_EQ(*ReadSafetensorsFile(db.checkpoint_file(1)), model);
  EXPECT_THAT(s->Checkpoint(1), StatusIs(StatusCode::kNotFound, "no checkpoint of version 1"));
  const ino_t written = InodeOf(db.checkpoint_file(1));
  RoundRecord r;
  r.round = 1;
  r.model_version = 1;
  r.model_sha256 = model.ContentSha256();
  ASSERT_OK(s->CommitRound(r, model, ""));
  EXPECT_EQ(InodeOf(db.checkpoint_file(1)), written);  // the commit wrote only the rows
  EXPECT_EQ(*s->Checkpoint(1), model);
}

TEST(SqliteStoreTest, ACommitOfAnotherModelThanThePreparedOneWritesItsOwnFile) {
  ScratchDatabase db("plexus_ckpt_prepared_other");
  auto s = *SqliteStore::Open(db.path());
  const ModelState prepared = Filled(1000, 1, 3.0f);
  ASSERT_OK(s->PrepareCheckpoint(prepared));
  const ModelState other = Filled(1000, 1, 4.0f);  // same version, other values, other memory
  RoundRecord r;
  r.round = 1;
  r.model_version = 1;
  ASSERT_OK(s->CommitRound(r, other, ""));
  EXPECT_EQ(*s->Checkpoint(1), other);
  EXPECT_EQ(*ReadSafetensorsFile(db.checkpoint_file(1)), other);
}

TEST(SqliteStoreTest, PreparingAVersionAlreadyStoredLeavesItsFile) {
  ScratchDatabase db("plexus_ckpt_prepared_stored");
  auto s = *SqliteStore::Open(db.path());
  const ModelState stored = Filled(1000, 1, 3.0f);
  RoundRecord r;
  r.round = 1;
  r.model_version = 1;
  ASSERT_OK(s->CommitRound(r, stored, ""));
  const ModelState other = Filled(1000, 1, 4.0f);
  ASSERT_OK(s->PrepareCheckpoint(other));
  EXPECT_EQ(*s->Checkpoint(1), stored);
  r.round = 2;
  EXPECT_THAT(s->CommitRound(r, other, ""), StatusIs(StatusCode::kAlreadyExists, "version 1"));
  EXPECT_EQ(*s->Checkpoint(1), stored);
}

TEST(SqliteStoreTest, AcceptedUpdatesAreFilesThatGoWithTheirRound) {
  ScratchDatabase db("plexus_updates_files");
  auto s = *SqliteStore::Open(db.path());
  ASSERT_OK(s->PutOpenRound({1, 0, {{"a", "r1a0-a"}, {"b", "r1a0-b"}}}));
  ASSERT_OK(s->PutAcceptedUpdate(1, 0, AcceptedUpdate("a", 250000, 1.0f)));
  ASSERT_OK(s->PutAcceptedUpdate(1, 0, AcceptedUpdate("b", 250000, 2.0f)));
  ASSERT_EQ(db.update_files(s.get()).size(), 2u);
  EXPECT_EQ(s->UpdateFolderSyncs(), 2u);  // two new files, each named durably before its row
  // A second upload from the same client replaces the first, file and all.
  ASSERT_OK(s->PutAcceptedUpdate(1, 0, AcceptedUpdate("a", 250000, 5.0f)));
  ASSERT_EQ(db.update_files(s.get()).size(), 2u);
  auto accepted = *s->ListAcceptedUpdates(1, 0);
  ASSERT_EQ(accepted.size(), 2u);
  EXPECT_EQ(accepted[0].delta.data()[0], 5.0f);
  EXPECT_EQ(accepted[1].delta.data()[0], 2.0f);
  const std::vector<std::string> replaced = db.spare_files(s.get());
  EXPECT_EQ(replaced.size(), 1u);  // the replaced one's, kept for reuse
  // A new attempt drops the old attempt's files; committing the round drops the rest.
  ASSERT_OK(s->PutOpenRound({1, 1, {{"a", "r1a1-a"}}}));
  EXPECT_TRUE(db.update_files(s.get()).empty());
  EXPECT_EQ(db.spare_files(s.get()).size(), 3u);
  // A smaller update written over a spare in place: the spare is taken, under its own name (no
  // rename, so no folder sync before its row commits), and cut to its size.
  const std::vector<std::string> folder = db.update_files();
  ASSERT_OK(s->PutAcceptedUpdate(1, 1, AcceptedUpdate("a", 10, 7.0f)));
  EXPECT_EQ(s->UpdateFolderSyncs(), 3u);
  EXPECT_EQ(db.update_files(), folder);
  ASSERT_EQ(db.update_files(s.get()).size(), 1u);
  EXPECT_EQ(db.spare_files(s.get()).size(), 2u);
  EXPECT_LT(std::filesystem::file_size(db.updates_dir() + "/" + db.update_files(s.get())[0]), 1000u);
  EXPECT_EQ((*s->ListAcceptedUpdates(1, 1))[0].delta, AcceptedUpdate("a", 10, 7.0f).delta);
  ASSERT_OK(s->PutCheckpoint(Filled(10, 0, 0.0f)));
  RoundRecord r;
  r.round = 1;
  r.model_version = 1;
  ASSERT_OK(s->CommitRound(r, Filled(10, 1, 1.0f), ""));
  EXPECT_TRUE(db.update_files(s.get()).empty());
  // After a restart the spares are orphans (too new to be removed yet); the update written then
  // is a new file again.
  s.reset();
  s = *SqliteStore::Open(db.path());
  EXPECT_TRUE(s->SpareUpdateFiles().empty());
  ASSERT_OK(s->PutOpenRound({2, 0, {{"a", "r2a0-a"}}}));
  ASSERT_OK(s->PutAcceptedUpdate(2, 0, AcceptedUpdate("a", 10, 3.0f)));
  EXPECT_EQ(s->UpdateFolderSyncs(), 1u);
  EXPECT_EQ((*s->ListAcceptedUpdates(2, 0))[0].delta, AcceptedUpdate("a", 10, 3.0f).delta);
}

TEST(SqliteStoreTest, AMissingUpdateFileIsDataLossAndLeftoversAreRemovedWhenAnOwnerOpens) {
  ScratchDatabase db("plexus_updates_orphans");
  {
    auto s = *SqliteStore::Open(db.path());
    ASSERT_OK(s->PutOpenRound({1, 0, {{"a", "r1a0-a"}, {"b", "r1a0-b"}}}));
    ASSERT_OK(s->PutAcceptedUpdate(1, 0, AcceptedUpdate("a", 10, 1.0f)));
  }
  // What a crash between a commit and the removal of the files it made obsolete leaves, written
  // long ago or just now, in both folders.
  const std::string old_leftover = db.updates_dir() + "/r0-a0-old.safetensors";
  const std::string new_leftover = db.updates_dir() + "/r1-a0-new.safetensors";
  const std::string checkpoint_leftover = db.checkpoint_file(7) + ".tmp";
  ASSERT_OK(WriteSafetensorsFile(old_leftover, Filled(10, 0, 1.0f)));
  ASSERT_OK(WriteSafetensorsFile(new_leftover, Filled(10, 0, 1.0f)));
  std::filesystem::create_directories(std::filesystem::path(checkpoint_leftover).parent_path());
  ASSERT_OK(WriteSafetensorsFile(checkpoint_leftover, Filled(10, 0, 1.0f)));
  std::filesystem::last_write_time(old_leftover, std::filesystem::file_time_type::clock::now() - std::chrono::hours(1));
  std::filesystem::last_write_time(db.updates_dir() + "/" + db.update_files()[0],
                                   std::filesystem::file_time_type::clock::now() - std::chrono::hours(1));
  // A reader removes nothing: it may run beside a server whose spare files no row names.
  ASSERT_OK(SqliteStore::Open(db.path()));
  EXPECT_TRUE(std::filesystem::exists(old_leftover));
  EXPECT_TRUE(std::filesystem::exists(new_leftover));
  // An owner (no other server can be writing: it holds the lock) removes every file no row names.
  auto s = *SqliteStore::Open(db.path(), SqliteStore::Access::kExclusive);
  EXPECT_FALSE(std::filesystem::exists(old_leftover));
  EXPECT_FALSE(std::filesystem::exists(new_leftover));
  EXPECT_FALSE(std::filesystem::exists(checkpoint_leftover));
  ASSERT_EQ(db.update_files().size(), 1u);  // an old file its row names stays
  ASSERT_EQ(s->ListAcceptedUpdates(1, 0)->size(), 1u);
  std::filesystem::remove(db.updates_dir() + "/" + db.update_files()[0]);
  EXPECT_THAT(s->ListAcceptedUpdates(1, 0), StatusIs(StatusCode::kDataLoss, "accepted update of a is lost"));
}

TEST(SqliteStoreTest, ReadsCheckpointsStoredInsideOlderDatabases) {
  ScratchDatabase db("plexus_ckpt_inline");
  const ModelState old_model = Filled(6, 0, 4.0f);
  {
    // The checkpoints table as databases had it before checkpoints moved to files.
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(db.path().c_str(), &raw), SQLITE_OK);
    ASSERT_EQ(
        sqlite3_exec(
            raw, "CREATE TABLE checkpoints (version INTEGER PRIMARY KEY, sha256 TEXT NOT NULL, bytes BLOB NOT NULL)",
            nullptr, nullptr, nullptr),
        SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(raw, "INSERT INTO checkpoints VALUES(0, ?, ?)", -1, &st, nullptr), SQLITE_OK);
    const std::string sha = old_model.ContentSha256(), bytes = EncodeSafetensors(old_model);
    sqlite3_bind_text(st, 1, sha.data(), static_cast<int>(sha.size()), SQLITE_TRANSIENT);
    sqlite3_bind_blob(st, 2, bytes.data(), static_cast<int>(bytes.size()), SQLITE_TRANSIENT);
    ASSERT_EQ(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    // And an accepted update of the open round, inline as well.
    ASSERT_EQ(sqlite3_exec(raw,
                           "CREATE TABLE open_round (id INTEGER PRIMARY KEY CHECK (id = 1), round INTEGER NOT NULL, "
                           "attempt INTEGER NOT NULL); INSERT INTO open_round VALUES(1, 1, 0); "
                           "CREATE TABLE accepted_updates (round INTEGER NOT NULL, attempt INTEGER NOT NULL, "
                           "client_id TEXT NOT NULL, task_id TEXT NOT NULL, base_version INTEGER NOT NULL, "
                           "num_examples INTEGER NOT NULL, local_steps INTEGER NOT NULL, train_loss REAL, "
                           "delta BLOB NOT NULL, PRIMARY KEY (round, attempt, client_id))",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    ASSERT_EQ(sqlite3_prepare_v2(raw, "INSERT INTO accepted_updates VALUES(1, 0, 'a', 'r1a0-a', 0, 3, 1, NULL, ?)", -1,
                                 &st, nullptr),
              SQLITE_OK);
    sqlite3_bind_blob(st, 1, bytes.data(), static_cast<int>(bytes.size()), SQLITE_TRANSIENT);
    ASSERT_EQ(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    sqlite3_close(raw);
  }
  auto s = *SqliteStore::Open(db.path());
  EXPECT_EQ(*s->Checkpoint(0), old_model);
  auto accepted = *s->ListAcceptedUpdates(1, 0);
  ASSERT_EQ(accepted.size(), 1u);
  EXPECT_EQ(accepted[0].delta, old_model);
  RoundRecord r;
  r.round = 1;
  r.model_version = 1;
  ASSERT_OK(s->CommitRound(r, Filled(6, 1, 5.0f), ""));
  EXPECT_TRUE(std::filesystem::exists(db.checkpoint_file(1)));
  EXPECT_EQ(*s->CheckpointVersions(), (std::vector<uint64_t>{0, 1}));
  EXPECT_EQ((**s->LatestCheckpoint()).data()[0], 5.0f);
}

TEST(SqliteStoreTest, SurvivesReopen) {
  ScratchDatabase db("plexus_reopen");
  const std::string& path = db.path();
  {
    auto s = *SqliteStore::Open(path);
    ModelState m = *ModelState::Create({{"w", {3}}}, 0);
    m.data()[1] = 4.0f;
    ASSERT_OK(s->PutCheckpoint(m));
    ASSERT_OK(s->PutClient({"c", 1, ""}));
    RoundRecord r;
    r.round = 1;
    r.model_version = 1;
    m.set_version(1);
    ASSERT_OK(s->CommitRound(r, m, "momentum"));
  }
  auto s = *SqliteStore::Open(path);
  EXPECT_EQ((*s->LatestCheckpoint())->data()[1], 4.0f);
  EXPECT_EQ(*s->AggregatorState(), "momentum");
  EXPECT_EQ(s->ListClients()->size(), 1u);
}

// A large strategy state lives in a file next to the checkpoints, under one of two names in turn
// (the committed one stays whole while the next is written); its row holds no copy.
TEST(SqliteStoreTest, LargeStrategyStatesAreFilesCheckedWhenRead) {
  ScratchDatabase db("plexus_state_file");
  const std::string dir = db.path() + ".checkpoints/";
  auto state_files = [&] {
    std::vector<std::string> names;
    for (const char* name : {"strategy-state-a", "strategy-state-b"}) {
      if (std::filesystem::exists(dir + name)) names.push_back(name);
    }
    return names;
  };
  std::string state(size_t{256} << 10, '\0');
  {
    auto s = *SqliteStore::Open(db.path(), SqliteStore::Access::kExclusive);
    ASSERT_OK(s->PutCheckpoint(Filled(6, 0, 1.0f)));
    RoundRecord r;
    for (uint64_t round = 1; round <= 3; ++round) {
      for (size_t i = 0; i < state.size(); ++i) state[i] = static_cast<char>((i * 7 + round) & 0xff);
      r.round = static_cast<int64_t>(round);
      r.model_version = round;
      ASSERT_OK(s->CommitRound(r, Filled(6, round, 2.0f), state));
      EXPECT_EQ(state_files().size(), round == 1 ? 1u : 2u) << round;
    }
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(db.path().c_str(), &raw), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(raw, "SELECT length(state), file FROM aggregator_state", -1, &st, nullptr), SQLITE_OK);
    ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
    EXPECT_EQ(sqlite3_column_int64(st, 0), 0);                                                    // no copy in the row
    EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 1)), "strategy-state-a");  // a, b, a
    sqlite3_finalize(st);
    sqlite3_close(raw);
  }
  {
    // An owner reopening keeps the named file and removes the other, which no row names.
    auto s = *SqliteStore::Open(db.path(), SqliteStore::Access::kExclusive);
    EXPECT_EQ(state_files(), (std::vector<std::string>{"strategy-state-a"}));
    EXPECT_EQ(*s->AggregatorState(), state);
    // The next state goes to the other name; the named one is untouched until its row changes.
    RoundRecord r;
    r.round = 4;
    r.model_version = 4;
    std::string next(state.size(), 'n');
    ASSERT_OK(s->CommitRound(r, Filled(6, 4, 2.0f), next));
    EXPECT_EQ(state_files().size(), 2u);
    EXPECT_EQ(*s->AggregatorState(), next);
    // One byte of the state changed in the file: the CRC-32C in its header no longer matches.
    {
      std::fstream f(dir + "strategy-state-b", std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(-1, std::ios::end);
      f.put('m');
    }
    EXPECT_THAT(s->AggregatorState(), StatusIs(StatusCode::kDataLoss, "damaged"));
    std::filesystem::resize_file(dir + "strategy-state-b", 100);
    EXPECT_THAT(s->AggregatorState(), StatusIs(StatusCode::kDataLoss, "damaged"));
    std::filesystem::remove(dir + "strategy-state-b");
    EXPECT_THAT(s->AggregatorState(), StatusIs(StatusCode::kDataLoss, "strategy state's file"));
  }
  {
    // An edited database cannot point the store at a file of its choosing.
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(db.path().c_str(), &raw), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(raw, "UPDATE aggregator_state SET file = '../v1.safetensors'", nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(raw);
    auto s = *SqliteStore::Open(db.path());
    EXPECT_THAT(s->AggregatorState(), StatusIs(StatusCode::kDataLoss, "not a state file"));
  }
}

// A database from before states moved to files: its inline state is read as it is, and the next
// large state goes to a file (the `file` column is added when the database opens).
TEST(SqliteStoreTest, ReadsAStrategyStateStoredInsideAnOlderDatabase) {
  ScratchDatabase db("plexus_state_inline");
  const std::string old_state("velocity\0\x7f", 10);
  {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(db.path().c_str(), &raw), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(raw,
                           "CREATE TABLE aggregator_state (id INTEGER PRIMARY KEY CHECK (id = 0), "
                           "version INTEGER NOT NULL, state BLOB NOT NULL)",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(raw, "INSERT INTO aggregator_state VALUES(0, 3, ?)", -1, &st, nullptr), SQLITE_OK);
    sqlite3_bind_blob(st, 1, old_state.data(), static_cast<int>(old_state.size()), SQLITE_TRANSIENT);
    ASSERT_EQ(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    sqlite3_close(raw);
  }
  auto s = *SqliteStore::Open(db.path(), SqliteStore::Access::kExclusive);
  EXPECT_EQ(*s->AggregatorState(), old_state);
  ASSERT_OK(s->PutCheckpoint(Filled(6, 0, 1.0f)));
  RoundRecord r;
  r.round = 1;
  r.model_version = 1;
  const std::string large(size_t{128} << 10, 'm');
  ASSERT_OK(s->CommitRound(r, Filled(6, 1, 2.0f), large));
  EXPECT_EQ(*s->AggregatorState(), large);
  EXPECT_TRUE(std::filesystem::exists(db.path() + ".checkpoints/strategy-state-a"));
}

// A second server on the same database once took over the first one's open round: the owner's
// lock refuses it at start, while readers (plexus export) still get in.
TEST(SqliteStoreTest, OneOwnerAtATimeAndReadersBesideIt) {
  ScratchDatabase db("plexus_owner_lock");
  {
    auto owner = SqliteStore::Open(db.path(), SqliteStore::Access::kExclusive);
    ASSERT_OK(owner);
    ASSERT_OK((*owner)->PutClient({"c", 1, ""}));
    EXPECT_THAT(SqliteStore::Open(db.path(), SqliteStore::Access::kExclusive).status(),
                StatusIs(StatusCode::kFailedPrecondition, "in use by another process"));
    auto reader = SqliteStore::Open(db.path());
    ASSERT_OK(reader);
    EXPECT_EQ((*reader)->ListClients()->size(), 1u);
    // The state file is the federation's: only its owner reads it.
    EXPECT_EQ(std::filesystem::status(db.path()).permissions() & std::filesystem::perms::all,
              std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  }
  // Closing the owner frees the database for the next one.
  auto next = SqliteStore::Open(db.path(), SqliteStore::Access::kExclusive);
  ASSERT_OK(next);
  EXPECT_EQ((*next)->ListClients()->size(), 1u);
}

TEST(SqliteStoreTest, LoggedUpdatesSurviveReopenAsSyncedFiles) {
  ScratchDatabase db("plexus_update_log");
  Update u;
  u.client_id = "a";
  u.task_id = "t1";
  u.num_examples = 1;
  u.delta = Filled(250000, 0, 0.5f);
  {
    auto s = *SqliteStore::Open(db.path(), SqliteStore::Access::kExclusive);
    ASSERT_OK(s->LogUpdate(1, u));
  }
  EXPECT_EQ(db.update_files().size(), 1u);  // models live next to the database, not in it
  auto s = *SqliteStore::Open(db.path(), SqliteStore::Access::kExclusive);
  std::vector<LoggedUpdate> back = *s->ListLoggedUpdates();
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].update.delta, u.delta);
  ASSERT_OK(s->PutCheckpoint(Filled(250000, 0, 0.0f)));
  RoundRecord r;
  r.round = 1;
  r.model_version = 1;
  r.logged_done = {1};
  ASSERT_OK(s->CommitRound(r, Filled(250000, 1, 1.0f), ""));
  EXPECT_TRUE(s->ListLoggedUpdates()->empty());
  EXPECT_TRUE(db.update_files(s.get()).empty());  // its file went with its row (a spare now)
}

// The 8-byte header length, read from the start of a file.
uint64_t HeaderLength(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  return n;
}

// Update and checkpoint files of a megabyte and more have their values on a block boundary, so
// that they go to the disk from the model's own memory (no copy) where the file system writes
// past the page cache; smaller ones keep the ordinary header. All read back the same.
TEST(SqliteStoreTest, LargeModelFilesStartTheirValuesOnABlockBoundary) {
  ScratchDatabase db("plexus_aligned_files");
  Update u = AcceptedUpdate("a", 300000, 0.25f);  // 1.2 MB of values
  const ModelState checkpoint = Filled(300000, 1, 0.5f);
  const DirectWriteBytes before = DirectWriteBytesSoFar();
  {
    auto s = *SqliteStore::Open(db.path(), SqliteStore::Access::kExclusive);
    ASSERT_OK(s->LogUpdate(1, u));
    ASSERT_OK(s->PutCheckpoint(checkpoint));
    ASSERT_OK(s->LogUpdate(2, AcceptedUpdate("b", 1000, 0.75f)));
  }
  const DirectWriteBytes after = DirectWriteBytesSoFar();
  std::vector<std::string> files = db.update_files();
  ASSERT_EQ(files.size(), 2u);
  std::vector<uint64_t> data_starts;
  for (const std::string& f : files) data_starts.push_back(8 + HeaderLength(db.updates_dir() + "/" + f));
  std::sort(data_starts.begin(), data_starts.end());
  EXPECT_EQ(data_starts[0] % 8, 0u);
  EXPECT_LT(data_starts[0], kDirectWriteAlignment);  // the small update: no padding
  EXPECT_EQ(data_starts[1], kDirectWriteAlignment);
  EXPECT_EQ(8 + HeaderLength(db.checkpoint_file(1)), kDirectWriteAlignment);
  if (after.from_caller != before.from_caller || after.copied != before.copied) {  // O_DIRECT taken
    const uint64_t values = 300000 * sizeof(float);
    EXPECT_EQ(after.from_caller - before.from_caller, 2 * (values / kDirectWriteAlignment * kDirectWriteAlignment));
  }
  auto s = *SqliteStore::Open(db.path(), SqliteStore::Access::kExclusive);
  std::vector<LoggedUpdate> back = *s->ListLoggedUpdates();
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].update.delta, u.delta);
  Result<ModelState> read = s->Checkpoint(1);
  ASSERT_OK(read.status());
  EXPECT_EQ(*read, checkpoint);
}

// Rows that arrive while a commit runs share the next one: the first writer's commit is held (the
// hook) until four more writers have written their files and queued; they then commit as one
// batch, in which a row whose sequence number is taken and a row of a round that is not open fail
// alone (their files removed) while the others commit.
TEST(SqliteStoreTest, UpdateRowsArrivingDuringACommitShareTheNextOne) {
  ScratchDatabase db("plexus_group_commit");
  auto s = *SqliteStore::Open(db.path(), SqliteStore::Access::kExclusive);
  ASSERT_OK(s->PutOpenRound({1, 0, {{"c", "r1a0-c"}}}));
  std::mutex mu;
  std::condition_variable cv;
  std::vector<size_t> batches;
  bool released = false;
  s->SetUpdateRowCommitHook([&](size_t rows) {
    std::unique_lock<std::mutex> lock(mu);
    batches.push_back(rows);
    cv.notify_all();
    cv.wait(lock, [&] { return released; });
  });
  auto logged = [](float fill) { return AcceptedUpdate("a", 1000, fill); };
  Status first;
  std::thread leader([&] { first = s->LogUpdate(1, logged(1.0f)); });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return batches.size() == 1; });
  }
  Status results[4];
  const Update sync_update = AcceptedUpdate("c", 1000, 5.0f);
  const Update not_open = AcceptedUpdate("d", 1000, 6.0f);
  std::vector<std::thread> writers;
  writers.emplace_back([&] { results[0] = s->LogUpdate(2, logged(2.0f)); });
  writers.emplace_back([&] { results[1] = s->LogUpdate(2, logged(3.0f)); });  // the same entry
  writers.emplace_back([&] { results[2] = s->PutAcceptedUpdate(1, 0, sync_update); });
  writers.emplace_back([&] { results[3] = s->PutAcceptedUpdate(2, 0, not_open); });
  while (s->QueuedUpdateRows() < 4) std::this_thread::yield();  // all four wait for the next commit
  {
    std::lock_guard<std::mutex> lock(mu);
    released = true;
  }
  cv.notify_all();
  leader.join();
  for (std::thread& t : writers) t.join();
  EXPECT_EQ(batches, (std::vector<size_t>{1, 4}));
  ASSERT_OK(first);
  // One of the two writers of entry 2 won; the other is AlreadyExists.
  const int winner = results[0].ok() ? 0 : 1;
  ASSERT_OK(results[winner]);
  EXPECT_THAT(results[1 - winner], StatusIs(StatusCode::kAlreadyExists, "2"));
  ASSERT_OK(results[2]);
  EXPECT_THAT(results[3], StatusIs(StatusCode::kFailedPrecondition, "not the open round"));
  std::vector<LoggedUpdate> log = *s->ListLoggedUpdates();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0].update.delta, logged(1.0f).delta);
  EXPECT_EQ(log[1].update.delta, logged(winner == 0 ? 2.0f : 3.0f).delta);
  std::vector<Update> accepted = *s->ListAcceptedUpdates(1, 0);
  ASSERT_EQ(accepted.size(), 1u);
  EXPECT_EQ(accepted[0].delta, sync_update.delta);
  // The two refused rows' files are spares (their names were synced with the batch's).
  EXPECT_EQ(db.update_files(s.get()).size(), 3u);
  EXPECT_EQ(db.spare_files(s.get()).size(), 2u);
}

Update CodedUpdate(const std::string& client, std::vector<float> values) {
  Update u = AcceptedUpdate(client, 0, 0.0f);
  u.delta = ModelState();
  u.coded = std::make_shared<testing::RawCodedDelta>(values);
  return u;
}

// A coded update is stored as its codec's bytes (file or row), not as float32, and is read back
// through the reader the server gives the store; without one, reading it is DataLoss naming the
// codec. Inline (in-memory database) and file-backed stores alike.
TEST(SqliteStoreTest, CodedUpdatesAreKeptAsTheirCodecsBytesAndReadBackThroughTheReader) {
  ScratchDatabase db("plexus_coded_updates");
  const Update a = CodedUpdate("a", {1.0f, -2.0f, 0.5f});
  const Update b = CodedUpdate("b", {4.0f, 0.0f, 0.0f});
  for (const std::string& path : {std::string(":memory:"), db.path()}) {
    SCOPED_TRACE(path);
    auto s = *SqliteStore::Open(path);
    s->SetCodedDeltaReader(testing::ReadRawCodedDelta);
    ASSERT_OK(s->PutOpenRound({1, 0, {{"a", "r1a0-a"}, {"b", "r1a0-b"}}}));
    ASSERT_OK(s->PutAcceptedUpdate(1, 0, a));
    ASSERT_OK(s->PutAcceptedUpdate(1, 0, AcceptedUpdate("b", 3, 2.0f)));  // float32 beside it
    ASSERT_OK(s->LogUpdate(4, b));
    std::vector<Update> accepted = *s->ListAcceptedUpdates(1, 0);
    ASSERT_EQ(accepted.size(), 2u);
    ASSERT_NE(accepted[0].coded, nullptr);
    EXPECT_EQ(accepted[0].coded->codec(), "raw");
    EXPECT_EQ(accepted[0].coded->bytes(), a.coded->bytes());
    EXPECT_EQ(accepted[0].delta.num_params(), 0u);
    EXPECT_EQ(accepted[0].task_id, a.task_id);
    EXPECT_EQ(accepted[1].coded, nullptr);
    EXPECT_EQ(accepted[1].delta.data()[0], 2.0f);
    std::vector<LoggedUpdate> logged = *s->ListLoggedUpdates();
    ASSERT_EQ(logged.size(), 1u);
    ASSERT_NE(logged[0].update.coded, nullptr);
    EXPECT_EQ(logged[0].update.coded->bytes(), b.coded->bytes());
  }
  // The file-backed store wrote the codes as they are: 12 bytes each, no safetensors header
  // (the float32 update's file is a safetensors file, longer).
  std::vector<std::string> files = db.update_files();
  ASSERT_EQ(files.size(), 3u);
  size_t twelve = 0;
  for (const std::string& f : files) twelve += std::filesystem::file_size(db.updates_dir() + "/" + f) == 12;
  EXPECT_EQ(twelve, 2u);
  auto reopened = *SqliteStore::Open(db.path());
  EXPECT_THAT(reopened->ListAcceptedUpdates(1, 0),
              StatusIs(StatusCode::kDataLoss, "kept in codec 'raw', and this store was opened without a reader"));
  reopened->SetCodedDeltaReader(testing::ReadRawCodedDelta);
  std::vector<Update> back = *reopened->ListAcceptedUpdates(1, 0);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].coded->bytes(), a.coded->bytes());
  EXPECT_EQ(back[0].coded->Materialize(*ModelState::Create({{"w", {3}}})).data()[1], -2.0f);
}

// Checkpoint retention keeps the newest N versions' models, version 0 and every K-th; the rounds
// keep their records, and an old version says why it is gone.
TEST(SqliteStoreTest, CheckpointRetentionKeepsTheNewestVersionZeroAndEveryKth) {
  ScratchDatabase db("plexus_retention");
  auto s = *SqliteStore::Open(db.path(), SqliteStore::Access::kExclusive);
  s->SetCheckpointRetention(/*keep_last=*/2, /*keep_every=*/3);
  ASSERT_OK(s->PutCheckpoint(Filled(1000, 0, 0.0f)));
  for (uint64_t v = 1; v <= 7; ++v) {
    RoundRecord r;
    r.round = v;
    r.model_version = v;
    ASSERT_OK(s->CommitRound(r, Filled(1000, v, static_cast<float>(v)), ""));
  }
  EXPECT_EQ(*s->CheckpointVersions(), (std::vector<uint64_t>{0, 3, 6, 7}));
  EXPECT_THAT(s->Checkpoint(4).status(), StatusIs(StatusCode::kNotFound, "checkpoint retention"));
  EXPECT_FALSE(std::filesystem::exists(db.checkpoint_file(4)));
  EXPECT_TRUE(std::filesystem::exists(db.checkpoint_file(6)));
  EXPECT_EQ((*s->Checkpoint(6)).data()[0], 6.0f);
  EXPECT_EQ((**s->LatestCheckpoint()).version(), 7u);
  EXPECT_EQ(s->ListRounds()->size(), 7u);  // every round's record stays
  // Pruned files are kept as spares and written over by the next checkpoints (v4, v5 and v7 took
  // the files of v1, v2 and v4); v5's is the one spare left. Each reads back whole.
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(db.path() + ".checkpoints"))
    files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  ASSERT_EQ(files.size(), 5u);
  EXPECT_EQ(files[0].rfind("spare-", 0), 0u);
  EXPECT_EQ(std::vector<std::string>(files.begin() + 1, files.end()),
            (std::vector<std::string>{"v0.safetensors", "v3.safetensors", "v6.safetensors", "v7.safetensors"}));
  EXPECT_EQ((**s->LatestCheckpoint()).data()[999], 7.0f);
  EXPECT_EQ((*s->Checkpoint(7)).ContentSha256(), Filled(1000, 7, 7.0f).ContentSha256());
}

TEST(SqliteStoreTest, RefusesAFileThatIsNotADatabase) {
  const std::string path = (std::filesystem::temp_directory_path() / "plexus_notadb.db").string();
  {
    FILE* f = fopen(path.c_str(), "w");
    fputs("this is not sqlite, just text that is long enough to matter......", f);
    fclose(f);
  }
  EXPECT_FALSE(SqliteStore::Open(path).ok());
  std::filesystem::remove(path);
}
#endif

}  // namespace
}  // namespace plexus
