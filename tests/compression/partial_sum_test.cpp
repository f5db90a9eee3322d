// The exactsum codec and the partial sums it carries (issue 41): an edge aggregator's partial,
// sent as bytes and folded by fedavg_exact at its parent, publishes the bits a flat server does.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "aggregators/partial_sum_delta.h"
#include "aggregators/registry.h"
#include "compression/codec.h"
#include "core/rng.h"
#include "tests/testing/random_round.h"
#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

using Federation = ::plexus::testing::RandomRound;

Federation RandomFederation(size_t n, size_t dims) { return ::plexus::testing::MakeRandomRound(n, dims); }

// An edge's partial sum of updates [begin, end), through the codec's bytes, as its parent reads it.
Update PartialOf(const Federation& f, size_t begin, size_t end, const std::string& edge) {
  ExactSum sum(f.base.num_params());
  int64_t examples = 0;
  for (size_t i = begin; i < end; ++i) {
    EXPECT_TRUE(sum.Add(f.updates[i].delta.data(), static_cast<double>(f.updates[i].num_examples)).ok());
    examples += f.updates[i].num_examples;
  }
  auto codec = *MakeCodec("exactsum");
  Result<std::shared_ptr<const CodedDelta>> read = codec->Read(EncodePartialSum(sum), f.base);
  EXPECT_TRUE(read.ok()) << read.status().ToString();
  Update u;
  u.client_id = edge;
  u.num_examples = examples;
  u.coded = *read;
  return u;
}

ModelState Aggregate(const std::string& strategy, const ModelState& base, const std::vector<const Update*>& in) {
  auto agg = *MakeAggregator(strategy, nullptr);
  EXPECT_TRUE(agg->Begin(base).ok());
  for (const Update* u : in) EXPECT_TRUE(agg->Fold(*u).ok()) << u->client_id;
  return *agg->Finalize();
}

TEST(PartialSumTest, EdgesPartialSumsPublishTheFlatServersBits) {
  const Federation f = RandomFederation(25, 1000);
  std::vector<const Update*> flat;
  for (const Update& u : f.updates) flat.push_back(&u);
  const std::string sha = Aggregate("fedavg_exact", f.base, flat).ContentSha256();

  // Two edges of 10 and 8 clients, and 7 clients straight at the root, in another order.
  const Update a = PartialOf(f, 0, 10, "edge-a"), b = PartialOf(f, 10, 18, "edge-b");
  std::vector<const Update*> mixed{&b};
  for (size_t i = 24; i >= 18; --i) mixed.push_back(&f.updates[i]);
  mixed.push_back(&a);
  EXPECT_EQ(Aggregate("fedavg_exact", f.base, mixed).ContentSha256(), sha);

  // A float strategy reads a partial as its mean with its weight: close to the same model.
  const ModelState plain = Aggregate("fedavg", f.base, mixed);
  const ModelState exact = Aggregate("fedavg_exact", f.base, flat);
  for (size_t k = 0; k < 1000; ++k) EXPECT_NEAR(plain.data()[k], exact.data()[k], 1e-6) << k;
}

TEST(PartialSumTest, TheCodecRoundTripsADeltaAndRefusesBrokenOrEmptySums) {
  auto codec = *MakeCodec("exactsum");
  EXPECT_TRUE(codec->has_coded_form());
  EXPECT_FALSE(codec->keeps_every_value()) << "not a codec for whole models";
  ModelState delta = *ModelState::Create({{"w", {3}}});
  delta.data()[0] = 0.25f;
  delta.data()[1] = -1.5f;
  delta.data()[2] = 1e-9f;  // below the fixed point's 2^-24: rounds to 0
  const std::string bytes = codec->Encode(delta, nullptr, 0);
  EXPECT_EQ(bytes.size(), codec->EncodedSize(delta));
  const ModelState back = *codec->Decode(bytes, delta);
  EXPECT_EQ(back.data()[0], 0.25f);
  EXPECT_EQ(back.data()[1], -1.5f);
  EXPECT_EQ(back.data()[2], 0.0f);

  EXPECT_THAT(codec->Decode(bytes.substr(0, bytes.size() - 1), delta).status(),
              StatusIs(StatusCode::kInvalidArgument, ""));
  EXPECT_THAT(codec->Decode(EncodePartialSum(ExactSum(3)), delta).status(),
              StatusIs(StatusCode::kInvalidArgument, "no updates"));
  ModelState wider = *ModelState::Create({{"w", {4}}});
  EXPECT_THAT(codec->Read(bytes, wider).status(), StatusIs(StatusCode::kInvalidArgument, ""));
}

// An edge's partial lists its client updates after the sum; the list comes back as sent, a
// broken list is refused, and a root's records name each update under the edge's path.
TEST(PartialSumTest, ThePartialsListOfClientUpdatesTravelsWithItAndBrokenListsAreRefused) {
  const Federation f = RandomFederation(2, 5);
  ExactSum sum(5);
  for (const Update& u : f.updates) ASSERT_TRUE(sum.Add(u.delta.data(), static_cast<double>(u.num_examples)).ok());
  const std::vector<PartialContribution> listed{{"c0", "t0", f.updates[0].delta.ContentSha256()},
                                                {"mid/c1", "t1", f.updates[1].delta.ContentSha256()}};
  auto codec = *MakeCodec("exactsum");
  const std::string bytes = EncodePartialSum(sum, listed);
  Result<std::shared_ptr<const CodedDelta>> read = codec->Read(bytes, f.base);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  const auto* partial = dynamic_cast<const PartialSumDelta*>(read->get());
  ASSERT_NE(partial, nullptr);
  EXPECT_EQ(partial->contributions(), listed);
  EXPECT_EQ(partial->sum(), sum);

  Update u;
  u.client_id = "edge-a";
  u.task_id = "root-task";
  u.coded = *read;
  const std::vector<MergedUpdate> entries = MergedEntriesOf(u, /*hash=*/true);
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[1].client_id, "edge-a/mid/c1");
  EXPECT_EQ(entries[1].task_id, "t1");
  EXPECT_EQ(entries[1].update_sha256, listed[1].update_sha256);
  // A client's own update: itself, hashed only when asked.
  EXPECT_EQ(MergedEntriesOf(f.updates[0], true).at(0).update_sha256, listed[0].update_sha256);
  EXPECT_EQ(MergedEntriesOf(f.updates[0], false).at(0).update_sha256, "");

  const std::string plain = EncodePartialSum(sum);
  for (const std::string& broken : {bytes.substr(0, bytes.size() - 1), bytes + "x", plain + "\x01",
                                    plain + std::string("\xff\xff\xff\x7f", 4) + std::string(24, '\0'),
                                    plain + std::string("\x01\0\0\0\x01\x10\0\0", 8) + std::string(2000, 'a')}) {
    EXPECT_THAT(codec->Read(broken, f.base).status(), StatusIs(StatusCode::kInvalidArgument, "")) << broken.size();
  }
  EXPECT_EQ(DecodeContributions(EncodeContributions(listed)).value(), listed);
}

// FedBuff's staleness factor scales a partial's sums, as it scales a client update's values; its
// weight among the others stays.
TEST(PartialSumTest, AStalePartialWeighsLessAndAPartialOfAnotherLayoutIsRefused) {
  const Federation f = RandomFederation(3, 10);
  Update a = PartialOf(f, 0, 3, "edge-a");
  const auto* partial = dynamic_cast<const PartialSumDelta*>(a.coded.get());
  ASSERT_NE(partial, nullptr);
  ExactSum scaled(10);
  ASSERT_TRUE(scaled.MergeScaled(partial->sum(), 0.5).ok());
  EXPECT_DOUBLE_EQ(scaled.weight(), partial->sum().weight());
  EXPECT_EQ(scaled.count(), 3);
  std::vector<float> m1(10), m2(10);
  ASSERT_TRUE(scaled.MeanInto(m1).ok());
  ASSERT_TRUE(partial->sum().MeanInto(m2).ok());
  for (size_t k = 0; k < 10; ++k) EXPECT_NEAR(m1[k], m2[k] / 2, 1e-6) << k;
  ExactSum once(10);
  ASSERT_TRUE(once.MergeScaled(partial->sum(), 1.0).ok());
  EXPECT_EQ(once, partial->sum()) << "factor 1 is exact";
  EXPECT_THAT(once.MergeScaled(partial->sum(), -1.0), StatusIs(StatusCode::kInvalidArgument, "non-positive"));
  EXPECT_EQ(once, partial->sum()) << "a refused merge changes nothing";

  auto agg = *MakeAggregator("fedavg_exact", nullptr);
  ModelState other = *ModelState::Create({{"w", {11}}});
  ASSERT_TRUE(agg->Begin(other).ok());
  EXPECT_THAT(agg->Fold(a), StatusIs(StatusCode::kInvalidArgument, ""));
  EXPECT_EQ(agg->num_folded(), 0u);
}

}  // namespace
}  // namespace plexus
