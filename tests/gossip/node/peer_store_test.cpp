#include "gossip/node/peer_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "tests/testing/status_matchers.h"
#include "tests/testing/vector_model.h"

namespace plexus::gossip {
namespace {

using ::plexus::testing::StatusIs;
using ::plexus::testing::VectorModel;

TEST(PeerStore, SavesAndLoadsModelRoundAndMembers) {
  const std::string path =
      std::filesystem::temp_directory_path() / ("plexus_peer_" + std::to_string(::getpid()) + ".db");
  std::filesystem::remove(path);
  {
    auto store = PeerStore::Open(path);
    ASSERT_OK(store);
    auto empty = (*store)->Load(3);
    ASSERT_OK(empty);
    EXPECT_FALSE(empty->has_value());
    ASSERT_OK((*store)->Save(3, 4, VectorModel({1, 2, 3}),
                             {{1, "127.0.0.1:1", 9, MemberState::kDead}, {3, "self", 1, MemberState::kAlive}}));
    ASSERT_OK(
        (*store)->Save(3, 5, VectorModel({4, 5, 6}),
                       {{1, "127.0.0.1:1", 10, MemberState::kAlive}, {2, "127.0.0.1:2", 2, MemberState::kSuspect}}));
  }
  auto store = PeerStore::Open(path);
  ASSERT_OK(store);
  auto saved = (*store)->Load(3);
  ASSERT_OK(saved);
  ASSERT_TRUE(saved->has_value());
  EXPECT_EQ((*saved)->rounds, 5u);
  EXPECT_EQ((*saved)->model.ContentSha256(), VectorModel({4, 5, 6}).ContentSha256());
  ASSERT_EQ((*saved)->members.size(), 2u);
  EXPECT_EQ((*saved)->members[0].incarnation, 10u);
  EXPECT_EQ((*saved)->members[1].state, MemberState::kSuspect);
  EXPECT_THAT((*store)->Load(4), StatusIs(StatusCode::kFailedPrecondition, "belongs to peer 3"));
  store->reset();  // closed before its files go
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
}

}  // namespace
}  // namespace plexus::gossip
