// One suite, run against every Store implementation.
#include <filesystem>
#include <functional>
#include <memory>

#include "server/store/memory_store.h"
#include "tests/testing/status_matchers.h"
#ifdef PLEXUS_HAVE_SQLITE_STORE
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
             ("plexus_store_" + GetParam().name + "_" + std::to_string(::getpid()) + ".db")).string();
    Remove();
    store_ = GetParam().open(path_);
    ASSERT_NE(store_, nullptr);
  }
  void TearDown() override {
    store_.reset();
    Remove();
  }
  void Remove() {
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path_ + suffix);
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
  ASSERT_OK(store_->CommitRound(r, Model(1, 2.0f), ""));
  EXPECT_THAT(store_->CommitRound(r, Model(1, 2.0f), ""), StatusIs(StatusCode::kAlreadyExists, "round 1"));
  r.round = 2;
  EXPECT_THAT(store_->CommitRound(r, Model(5, 2.0f), ""), StatusIs(StatusCode::kInvalidArgument, "version"));
  ASSERT_OK(store_->SetRoundEvaluation(1, 0.8, 0.5));
  EXPECT_THAT(store_->SetRoundEvaluation(9, 0.8, 0.5), StatusIs(StatusCode::kNotFound, "round 9"));

  auto rounds = *store_->ListRounds();
  ASSERT_EQ(rounds.size(), 1u);
  EXPECT_EQ(rounds[0].num_dropped, 1);
  EXPECT_DOUBLE_EQ(*rounds[0].test_accuracy, 0.8);
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

TEST_P(StoreConformanceTest, MergedUpdatesTravelWithTheirRound) {
  ASSERT_OK(store_->PutCheckpoint(Model(0, 0.0f)));
  RoundRecord r;
  r.round = 1;
  r.model_version = 1;
  r.merged = {{"b", "t-b", 0, 3, 12.5}, {"a", "t-a", 2, 3, std::nullopt}};
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
  EXPECT_EQ(rounds[0].merged, (std::vector<MergedUpdate>{{"b", "t-b", 0, 3, 12.5}, {"a", "t-a", 2, 3, std::nullopt}}));
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
TEST(SqliteStoreTest, SurvivesReopen) {
  const std::string path = (std::filesystem::temp_directory_path() / "plexus_reopen.db").string();
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
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
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
}

TEST(SqliteStoreTest, RefusesAFileThatIsNotADatabase) {
  const std::string path = (std::filesystem::temp_directory_path() / "plexus_notadb.db").string();
  { FILE* f = fopen(path.c_str(), "w"); fputs("this is not sqlite, just text that is long enough to matter......", f); fclose(f); }
  EXPECT_FALSE(SqliteStore::Open(path).ok());
  std::filesystem::remove(path);
}
#endif

}  // namespace
}  // namespace plexus
