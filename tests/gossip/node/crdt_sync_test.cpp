// The CRDT sync's wire side: a NetworkSyncPeer whose questions are serialized, answered by
// AnswerCrdtRequest from a remote replica and parsed back, as between two peers.
#include "gossip/node/crdt_sync.h"

#include <gtest/gtest.h>

#include "crdt/signing.h"
#include "tests/testing/vector_model.h"

namespace plexus::gossip {
namespace {

class CrdtSyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 3; ++i) {
      keys_.push_back(*SigningKey::FromSeed(std::string(31, 's') + static_cast<char>('0' + i)));
      all_.Add(Author(i), keys_.back().public_key());
    }
  }
  static std::string Author(int i) { return "peer-" + std::to_string(i); }

  Contribution Make(int author, float value) {
    Contribution c;
    c.author = Author(author);
    c.created_round = 4;
    c.delta = testing::VectorModel({value, value + 1});
    EXPECT_TRUE(Sign(c, keys_[static_cast<size_t>(author)]).ok());
    return c;
  }

  // Asks `remote` through the wire messages, counting the questions.
  NetworkSyncPeer::Ask Wire(const CrdtReplica* remote) {
    return [this, remote](v1::CrdtRequest request) -> Result<CrdtAnswer> {
      ++asked_;
      EXPECT_EQ(request.round(), 4u);
      v1::CrdtRequest sent;
      EXPECT_TRUE(sent.ParseFromString(request.SerializeAsString()));
      std::vector<std::shared_ptr<const ModelState>> deltas;
      const v1::CrdtReply reply = AnswerCrdtRequest(remote, sent, &deltas);
      CrdtAnswer answer;
      EXPECT_TRUE(answer.reply.ParseFromString(reply.SerializeAsString()));
      for (const auto& d : deltas) answer.deltas.push_back(*d);
      return answer;
    };
  }

  std::vector<SigningKey> keys_;
  AuthorKeys all_;
  int asked_ = 0;
};

TEST_F(CrdtSyncTest, APullOverTheWireEndsInTheSameStateAsALocalOne) {
  CrdtReplica remote("peer-1", &all_), mine("peer-0", &all_), local_copy("peer-0", &all_);
  ASSERT_TRUE(mine.Add(Make(0, 1)).ok());
  ASSERT_TRUE(local_copy.Add(Make(0, 1)).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(remote.Add(Make(i, 10.0f * i)).ok());
  const std::string retracted = *remote.Add(Make(2, 99));
  ASSERT_TRUE(remote.Retract(retracted).ok());

  NetworkSyncPeer peer(4, Wire(&remote), &all_);
  ASSERT_TRUE(mine.SyncFrom(peer).ok());
  ASSERT_TRUE(local_copy.SyncFrom(remote).ok());
  EXPECT_GT(asked_, 1);  // digest questions, then a fetch
  EXPECT_EQ(mine.StateDigest(), local_copy.StateDigest());
  EXPECT_EQ(mine.LiveIds(), local_copy.LiveIds());
  const ModelState zero = ModelState::ZerosLike(testing::VectorModel({0, 0}));
  EXPECT_EQ(*mine.Resolve("fedavg", zero), *local_copy.Resolve("fedavg", zero));
  // Once the remote has pulled from this one too, a pull asks one question: the roots agree.
  ASSERT_TRUE(remote.SyncFrom(mine).ok());
  asked_ = 0;
  ASSERT_TRUE(mine.SyncFrom(peer).ok());
  EXPECT_EQ(asked_, 1);
}

TEST_F(CrdtSyncTest, ContributionsOfAuthorsNotMetYetWaitForTheirKey) {
  AuthorKeys known;  // this node has met peers 0 and 1, not 2
  known.Add(Author(0), keys_[0].public_key());
  known.Add(Author(1), keys_[1].public_key());
  CrdtReplica remote("peer-1", &all_), mine("peer-0", &known);
  ASSERT_TRUE(remote.Add(Make(1, 1)).ok());
  ASSERT_TRUE(remote.Add(Make(2, 2)).ok());
  NetworkSyncPeer peer(4, Wire(&remote), &known);
  ASSERT_TRUE(mine.SyncFrom(peer).ok());
  EXPECT_EQ(mine.LiveIds().size(), 1u);  // peer 1's only
  known.Add(Author(2), keys_[2].public_key());
  ASSERT_TRUE(mine.SyncFrom(peer).ok());
  EXPECT_EQ(mine.StateDigest(), remote.StateDigest());
}

TEST_F(CrdtSyncTest, AForgedContributionIsRefusedAndNothingJoins) {
  CrdtReplica remote("peer-1", &all_), mine("peer-0", &all_);
  ASSERT_TRUE(remote.Add(Make(1, 1)).ok());
  NetworkSyncPeer::Ask forge = [&](v1::CrdtRequest request) -> Result<CrdtAnswer> {
    PLEXUS_ASSIGN_OR_RETURN(CrdtAnswer answer, Wire(&remote)(std::move(request)));
    for (ModelState& d : answer.deltas) d.data()[0] = 1000;  // altered on the way
    return answer;
  };
  NetworkSyncPeer peer(4, forge, &all_);
  EXPECT_FALSE(mine.SyncFrom(peer).ok());
  EXPECT_TRUE(mine.LiveIds().empty());
}

TEST_F(CrdtSyncTest, ARoundThePeerDoesNotHoldIsEmptyAndFailuresComeBackAsErrors) {
  CrdtReplica mine("peer-0", &all_);
  ASSERT_TRUE(mine.Add(Make(0, 1)).ok());
  NetworkSyncPeer empty(4, Wire(nullptr), &all_);
  ASSERT_TRUE(mine.SyncFrom(empty).ok());
  EXPECT_EQ(mine.LiveIds().size(), 1u);

  NetworkSyncPeer silent(
      4, [](v1::CrdtRequest) -> Result<CrdtAnswer> { return UnavailableError("no answer"); }, &all_);
  EXPECT_EQ(mine.SyncFrom(silent).status().code(), StatusCode::kUnavailable);

  CrdtReplica remote("peer-1", &all_);
  ASSERT_TRUE(remote.Add(Make(1, 1)).ok());
  NetworkSyncPeer short_of_deltas(
      4,
      [&](v1::CrdtRequest request) -> Result<CrdtAnswer> {
        PLEXUS_ASSIGN_OR_RETURN(CrdtAnswer answer, Wire(&remote)(std::move(request)));
        answer.deltas.clear();
        return answer;
      },
      &all_);
  EXPECT_EQ(mine.SyncFrom(short_of_deltas).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(mine.LiveIds().size(), 1u);
}

}  // namespace
}  // namespace plexus::gossip
