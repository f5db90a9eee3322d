#include "aggregators/update_bundle.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "aggregators/partial_sum_delta.h"
#include "aggregators/registry.h"
#include "compression/codec.h"
#include "tests/testing/random_round.h"
#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

// The bundle as its receiver reads it.
std::shared_ptr<const UpdateBundle> ReadBundle(const std::string& bytes, const ModelState& layout) {
  Result<std::shared_ptr<const CodedDelta>> read = (*MakeCodec(kUpdateBundleCodec))->Read(bytes, layout);
  EXPECT_TRUE(read.ok()) << read.status().ToString();
  return read.ok() ? std::dynamic_pointer_cast<const UpdateBundle>(*read) : nullptr;
}

// Forwarded updates arrive as they were sent: float32 values bit for bit, coded ones in their
// codec, names, tasks, examples, steps and losses; a bundle inside a bundle is flattened under its
// sender's path, and a root folding the bundle's updates gets the flat server's model.
TEST(UpdateBundleTest, ForwardedUpdatesArriveAsSentAndFoldAsTheFlatServersDo) {
  ::plexus::testing::RandomRound r = ::plexus::testing::MakeRandomRound(4, 300);
  for (size_t i = 0; i < r.updates.size(); ++i) {
    r.updates[i].task_id = "t" + std::to_string(i);
    r.updates[i].local_steps = 10 + static_cast<int64_t>(i);
    r.updates[i].metrics["train_loss"] = 0.5 + static_cast<double>(i);
  }
  Update coded = r.updates[3];  // an int8 upload, forwarded in its codes
  auto int8 = *MakeCodec("int8");
  coded.coded = *int8->Read(int8->Encode(coded.delta, nullptr, 0), r.base);
  coded.delta = ModelState();
  const std::vector<Update> below{r.updates[1], r.updates[2]};
  Update child;  // an edge below that forwarded two updates itself
  child.client_id = "edge-c";
  child.coded = ReadBundle(EncodeUpdateBundle(below, 300), r.base);
  ASSERT_NE(child.coded, nullptr);
  const std::vector<Update> sent{r.updates[0], child, coded};
  const std::shared_ptr<const UpdateBundle> bundle = ReadBundle(EncodeUpdateBundle(sent, 300), r.base);
  ASSERT_NE(bundle, nullptr);
  ASSERT_EQ(bundle->updates().size(), 4u);
  const std::vector<std::string> paths{"c0", "edge-c/c1", "edge-c/c2", "c3"};
  for (size_t i = 0; i < 4; ++i) {
    const Update& u = bundle->updates()[i];
    EXPECT_EQ(u.client_id, paths[i]);
    EXPECT_EQ(u.task_id, r.updates[i].task_id);
    EXPECT_EQ(u.num_examples, r.updates[i].num_examples);
    EXPECT_EQ(u.local_steps, r.updates[i].local_steps);
    EXPECT_EQ(u.metrics.at("train_loss"), r.updates[i].metrics.at("train_loss"));
  }
  EXPECT_EQ(bundle->updates()[0].delta.ContentSha256(), r.updates[0].delta.ContentSha256());
  ASSERT_NE(bundle->updates()[3].coded, nullptr);
  EXPECT_EQ(bundle->updates()[3].coded->bytes(), coded.coded->bytes());

  Update forwarded;
  forwarded.client_id = "edge-a";
  forwarded.coded = bundle;
  const std::vector<Update> unbundled = UnbundledUpdates(forwarded);
  EXPECT_EQ(unbundled[1].client_id, "edge-a/edge-c/c1");
  EXPECT_EQ(BundledOrSelf(forwarded).size(), 4u);
  // The median over the forwarded updates is the median over the updates sent directly.
  const auto median = [&](const std::vector<Update>& in) {
    auto agg = *MakeAggregator("median", nullptr);
    EXPECT_OK(agg->Begin(r.base));
    for (Update u : in) {
      if (u.coded) MaterializeCoded(u, r.base);
      EXPECT_OK(agg->Fold(u));
    }
    return agg->Finalize()->ContentSha256();
  };
  std::vector<Update> direct{r.updates[0], r.updates[1], r.updates[2], coded};
  EXPECT_EQ(median(unbundled), median(direct));
}

TEST(UpdateBundleTest, BrokenBundlesAreRefused) {
  ::plexus::testing::RandomRound r = ::plexus::testing::MakeRandomRound(2, 10);
  auto codec = *MakeCodec(kUpdateBundleCodec);
  const std::string good = EncodeUpdateBundle(r.updates, 10);
  ASSERT_TRUE(codec->Read(good, r.base).ok());
  Update nan = r.updates[0];
  nan.delta.data()[3] = std::nanf("");
  Update no_examples = r.updates[0];
  no_examples.num_examples = 0;
  Update partial = r.updates[0];  // a partial sum is not a client update
  ExactSum sum(10);
  ASSERT_TRUE(sum.Add(r.updates[0].delta.data(), 1.0).ok());
  partial.coded = *PartialSumDelta::Make(kPartialSumCodec, EncodePartialSum(sum), sum);
  EXPECT_THAT(codec->Read(EncodeUpdateBundle(std::vector<Update>{partial}, 10), r.base).status(),
              StatusIs(StatusCode::kInvalidArgument, "client updates only"));
  ModelState wider = *ModelState::Create({{"w", {11}}});
  for (const std::string& broken :
       {good.substr(0, good.size() - 1), good + "x", EncodeUpdateBundle(std::vector<Update>{nan}, 10),
        EncodeUpdateBundle(std::vector<Update>{no_examples}, 10), EncodeUpdateBundle(std::vector<Update>{}, 10)}) {
    EXPECT_THAT(codec->Read(broken, r.base).status(), StatusIs(StatusCode::kInvalidArgument, "")) << broken.size();
  }
  EXPECT_THAT(codec->Read(good, wider).status(), StatusIs(StatusCode::kInvalidArgument, ""));
}

}  // namespace
}  // namespace plexus
