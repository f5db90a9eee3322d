#include "crdt/store/replica_file.h"

#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>

#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

class ReplicaFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ =
        (std::filesystem::temp_directory_path() / ("plexus_replica_" + std::to_string(::getpid()) + ".db")).string();
    Remove();
    for (int a = 0; a < 3; ++a) {
      keys_list_.push_back(*SigningKey::FromSeed(std::string(31, 'f') + static_cast<char>('0' + a)));
      keys_.Add("author-" + std::to_string(a), keys_list_.back().public_key());
    }
  }
  void TearDown() override { Remove(); }
  void Remove() {
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path_ + suffix);
  }
  Contribution Make(int author, float value) {
    Contribution c;
    c.author = "author-" + std::to_string(author);
    c.examples = 5;
    c.delta = *ModelState::Create({{"w", {3}}});
    for (float& x : c.delta.data()) x = value;
    EXPECT_OK(Sign(c, keys_list_[static_cast<size_t>(author)]));
    return c;
  }

  std::string path_;
  std::vector<SigningKey> keys_list_;
  AuthorKeys keys_;
};

TEST_F(ReplicaFileTest, SavesAndLoadsTheSameStateAndKeepsDotsFresh) {
  CrdtReplica r("r1", &keys_);
  const std::string a = *r.Add(Make(0, 1.0f));
  ASSERT_OK(r.Add(Make(1, 2.0f)));
  ASSERT_OK(r.Retract(a));
  ASSERT_OK(SaveReplica(r, path_));
  ASSERT_OK(SaveReplica(r, path_));  // idempotent
  auto loaded = LoadReplica(path_, &keys_);
  ASSERT_OK(loaded);
  EXPECT_EQ((*loaded)->StateDigest(), r.StateDigest());
  EXPECT_EQ((*loaded)->LiveIds(), r.LiveIds());
  // A re-add after reloading gets a dot the old tombstone does not cover.
  ASSERT_OK((*loaded)->Add(Make(0, 1.0f)));
  EXPECT_EQ((*loaded)->LiveIds().size(), 2u);
  ModelState base = *ModelState::Create({{"w", {3}}});
  EXPECT_FLOAT_EQ((*loaded)->Resolve("fedavg", base)->data()[0], 1.5f);
  CrdtReplica other("r2", &keys_);
  EXPECT_THAT(SaveReplica(other, path_), StatusIs(StatusCode::kFailedPrecondition, "holds replica 'r1'"));
}

TEST_F(ReplicaFileTest, ATamperedFileIsRefused) {
  CrdtReplica r("r1", &keys_);
  ASSERT_OK(r.Add(Make(2, 3.0f)));
  ASSERT_OK(SaveReplica(r, path_));
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE contributions SET examples = examples + 1", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  EXPECT_THAT(LoadReplica(path_, &keys_).status(),
              StatusIs(StatusCode::kInvalidArgument, "does not match its content"));
  Remove();
  EXPECT_THAT(LoadReplica(path_, &keys_).status(), StatusIs(StatusCode::kNotFound, "no replica state"));
}

}  // namespace
}  // namespace plexus
