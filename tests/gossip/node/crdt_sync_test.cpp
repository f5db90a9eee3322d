// The CRDT sync's wire side: a CrdtPull whose requests are serialized, answered by
// AnswerCrdtRequest from a remote replica and parsed back, as between two peers.
#include "gossip/node/crdt_sync.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "compression/codec.h"
#include "crdt/signing.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/vector_model.h"

namespace plexus::gossip {
namespace {

using ::plexus::testing::StatusIs;

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

  using Ask = std::function<Result<CrdtAnswer>(v1::CrdtRequest)>;

  // Asks `remote` through the wire messages, counting the questions.
  Ask Wire(const CrdtReplica* remote) {
    return [this, remote](v1::CrdtRequest request) -> Result<CrdtAnswer> {
      ++asked_;
      EXPECT_EQ(request.round(), 4u);
      v1::CrdtRequest sent;
      EXPECT_TRUE(sent.ParseFromString(request.SerializeAsString()));
      std::vector<ShippedDelta> deltas;
      const v1::CrdtReply reply = AnswerCrdtRequest(remote, sent, &deltas);
      CrdtAnswer answer;
      EXPECT_TRUE(answer.reply.ParseFromString(reply.SerializeAsString()));
      for (const ShippedDelta& d : deltas) {
        answer.deltas.push_back(*d.values);
        answer.coded.push_back(d.coded);
      }
      return answer;
    };
  }

  // Drives a CrdtPull of round 4 to its end, answering each batch of requests in reverse order
  // (answers may come in any order), then joins its delta into `mine`.
  Status Pull(CrdtReplica& mine, const Ask& ask, const AuthorKeys* keys) {
    CrdtPull pull(4, mine, keys);
    ++pulls_;
    while (!pull.done()) {
      std::vector<v1::CrdtRequest> requests = pull.TakeRequests();
      if (requests.empty()) return InternalError("a pull that is not done asks nothing");
      for (auto it = requests.rbegin(); it != requests.rend(); ++it) {
        PLEXUS_ASSIGN_OR_RETURN(CrdtAnswer answer, ask(*it));
        PLEXUS_RETURN_IF_ERROR(pull.Answered(*it, std::move(answer)));
      }
    }
    const StateDelta delta = pull.TakeDelta();
    return mine.Restore(delta.set, delta.contributions);
  }

  std::vector<SigningKey> keys_;
  AuthorKeys all_;
  int asked_ = 0;
  int pulls_ = 0;
};

TEST_F(CrdtSyncTest, APullOverTheWireEndsInTheSameStateAsALocalOne) {
  CrdtReplica remote("peer-1", &all_), mine("peer-0", &all_), local_copy("peer-0", &all_);
  ASSERT_TRUE(mine.Add(Make(0, 1)).ok());
  ASSERT_TRUE(local_copy.Add(Make(0, 1)).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(remote.Add(Make(i, 10.0f * i)).ok());
  const std::string retracted = *remote.Add(Make(2, 99));
  ASSERT_TRUE(remote.Retract(retracted).ok());

  ASSERT_OK(Pull(mine, Wire(&remote), &all_));
  ASSERT_TRUE(local_copy.SyncFrom(remote).ok());
  EXPECT_GT(asked_, 1);  // digest questions, then a fetch
  EXPECT_EQ(mine.StateDigest(), local_copy.StateDigest());
  EXPECT_EQ(mine.LiveIds(), local_copy.LiveIds());
  const ModelState zero = ModelState::ZerosLike(testing::VectorModel({0, 0}));
  EXPECT_EQ(*mine.Resolve("fedavg", zero), *local_copy.Resolve("fedavg", zero));
  // Once the remote has pulled from this one too, a pull asks one question: the roots agree.
  ASSERT_TRUE(remote.SyncFrom(mine).ok());
  asked_ = 0;
  ASSERT_OK(Pull(mine, Wire(&remote), &all_));
  EXPECT_EQ(asked_, 1);
}

// A contribution that travels in a codec's bytes ships them, not its float32 values, names the
// codec, and keeps them on the node that pulled it (to pass them on as they came).
TEST_F(CrdtSyncTest, ACodedContributionTravelsAsItsBytesAndThePullerKeepsThem) {
  std::vector<float> values(64);
  for (size_t j = 0; j < values.size(); ++j) values[j] = 0.01f * static_cast<float>(j) - 0.2f;
  const ModelState layout = testing::VectorModel(values);
  const std::unique_ptr<Codec> int8 = *MakeCodec("int8");
  Contribution c;
  c.author = Author(1);
  c.created_round = 4;
  c.codec = "int8";
  c.coded = std::make_shared<const std::string>(int8->Encode(layout, nullptr, 0));
  c.delta = *int8->Decode(*c.coded, layout);
  ASSERT_OK(Sign(c, keys_[1]));
  CrdtReplica remote("peer-1", &all_), mine("peer-0", &all_);
  const std::string id = *remote.Add(c);

  int shipped = 0;
  Ask ask = [&](v1::CrdtRequest request) -> Result<CrdtAnswer> {
    std::vector<ShippedDelta> deltas;
    CrdtAnswer answer;
    answer.reply = AnswerCrdtRequest(&remote, request, &deltas);
    for (int i = 0; i < answer.reply.contributions_size(); ++i) {
      const ShippedDelta& d = deltas[static_cast<size_t>(i)];
      EXPECT_EQ(answer.reply.contributions(i).codec(), "int8");
      EXPECT_NE(d.coded, nullptr);
      if (d.coded == nullptr) return InternalError("shipped as float32");
      ++shipped;
      // The receiver decodes the bytes itself, as a peer does.
      answer.deltas.push_back(*int8->Decode(*d.coded, layout));
      answer.coded.push_back(std::make_shared<const std::string>(*d.coded));
    }
    return answer;
  };
  ASSERT_OK(Pull(mine, ask, &all_));
  EXPECT_EQ(shipped, 1);
  const Contribution* pulled = mine.Find(id);
  ASSERT_NE(pulled, nullptr);
  EXPECT_EQ(pulled->codec, "int8");
  ASSERT_NE(pulled->coded, nullptr);
  EXPECT_EQ(*pulled->coded, *c.coded);
  EXPECT_EQ(pulled->WireBytes(), c.coded->size());
  EXPECT_EQ(pulled->delta, c.delta);
}

TEST_F(CrdtSyncTest, ContributionsOfAuthorsNotMetYetWaitForTheirKey) {
  AuthorKeys known;  // this node has met peers 0 and 1, not 2
  known.Add(Author(0), keys_[0].public_key());
  known.Add(Author(1), keys_[1].public_key());
  CrdtReplica remote("peer-1", &all_), mine("peer-0", &known);
  ASSERT_TRUE(remote.Add(Make(1, 1)).ok());
  ASSERT_TRUE(remote.Add(Make(2, 2)).ok());
  ASSERT_OK(Pull(mine, Wire(&remote), &known));
  EXPECT_EQ(mine.LiveIds().size(), 1u);  // peer 1's only
  known.Add(Author(2), keys_[2].public_key());
  ASSERT_OK(Pull(mine, Wire(&remote), &known));
  EXPECT_EQ(mine.StateDigest(), remote.StateDigest());
}

TEST_F(CrdtSyncTest, AForgedContributionIsRefusedAndNothingJoins) {
  CrdtReplica remote("peer-1", &all_), mine("peer-0", &all_);
  ASSERT_TRUE(remote.Add(Make(1, 1)).ok());
  Ask forge = [&](v1::CrdtRequest request) -> Result<CrdtAnswer> {
    PLEXUS_ASSIGN_OR_RETURN(CrdtAnswer answer, Wire(&remote)(std::move(request)));
    for (ModelState& d : answer.deltas) d.data()[0] = 1000;  // altered on the way
    return answer;
  };
  EXPECT_THAT(Pull(mine, forge, &all_), StatusIs(StatusCode::kInvalidArgument, "does not match its content"));
  EXPECT_TRUE(mine.LiveIds().empty());
}

TEST_F(CrdtSyncTest, ARoundThePeerDoesNotHoldIsEmptyAndFailuresComeBackAsErrors) {
  CrdtReplica mine("peer-0", &all_);
  ASSERT_TRUE(mine.Add(Make(0, 1)).ok());
  ASSERT_OK(Pull(mine, Wire(nullptr), &all_));
  EXPECT_EQ(mine.LiveIds().size(), 1u);

  Ask silent = [](v1::CrdtRequest) -> Result<CrdtAnswer> { return UnavailableError("no answer"); };
  EXPECT_EQ(Pull(mine, silent, &all_).code(), StatusCode::kUnavailable);

  CrdtReplica remote("peer-1", &all_);
  ASSERT_TRUE(remote.Add(Make(1, 1)).ok());
  Ask short_of_deltas = [&](v1::CrdtRequest request) -> Result<CrdtAnswer> {
    PLEXUS_ASSIGN_OR_RETURN(CrdtAnswer answer, Wire(&remote)(std::move(request)));
    answer.deltas.clear();
    return answer;
  };
  EXPECT_EQ(Pull(mine, short_of_deltas, &all_).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(mine.LiveIds().size(), 1u);
}

TEST_F(CrdtSyncTest, ALevelOfTheTreeTravelsTogetherAndUnaskedAnswersAreRefused) {
  // 300 entries on the remote side, 100 others here: the roots differ, then their 16 children
  // are asked in one batch (not one after another), then below those that differ.
  CrdtReplica remote("peer-1", &all_), mine("peer-0", &all_);
  for (int i = 0; i < 300; ++i) ASSERT_TRUE(remote.Add(Make(i % 3, static_cast<float>(i))).ok());
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(mine.Add(Make(0, 1000.0f + static_cast<float>(i))).ok());
  CrdtPull pull(4, mine, &all_);
  const Ask ask = Wire(&remote);
  std::vector<v1::CrdtRequest> root = pull.TakeRequests();
  ASSERT_EQ(root.size(), 1u);
  EXPECT_TRUE(pull.TakeRequests().empty());  // nothing more until the root is answered
  // An answer to a question never asked changes nothing and is refused.
  v1::CrdtRequest unasked;
  unasked.set_round(4);
  unasked.set_node("7");
  EXPECT_EQ(pull.Answered(unasked, *ask(unasked)).code(), StatusCode::kInvalidArgument);
  ASSERT_OK(pull.Answered(root[0], *ask(root[0])));
  const std::vector<v1::CrdtRequest> level = pull.TakeRequests();
  EXPECT_EQ(level.size(), 16u);
  for (const v1::CrdtRequest& r : level) ASSERT_OK(pull.Answered(r, *ask(r)));
  int batches = 2;
  while (!pull.done()) {
    const std::vector<v1::CrdtRequest> next = pull.TakeRequests();
    ASSERT_FALSE(next.empty());
    ++batches;
    for (const v1::CrdtRequest& r : next) ASSERT_OK(pull.Answered(r, *ask(r)));
  }
  EXPECT_LE(batches, 6);  // root, children, grandchildren or entries, entries, the fetch
  const StateDelta delta = pull.TakeDelta();
  ASSERT_OK(mine.Restore(delta.set, delta.contributions));
  EXPECT_EQ(mine.LiveIds().size(), 400u);
}

}  // namespace
}  // namespace plexus::gossip
