#include "compute/partition.h"

#include <algorithm>
#include <set>

#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

std::vector<uint8_t> Labels(size_t n) {
  std::vector<uint8_t> l(n);
  for (size_t i = 0; i < n; ++i) l[i] = static_cast<uint8_t>(i % 10);
  return l;
}

// Every index appears in exactly one part.
void ExpectExactCover(const std::vector<std::vector<uint32_t>>& parts, size_t n) {
  std::vector<int> seen(n, 0);
  for (const auto& p : parts) {
    EXPECT_FALSE(p.empty());
    for (uint32_t i : p) seen[i]++;
  }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
}

TEST(PartitionTest, ParsesSpecs) {
  EXPECT_EQ(PartitionSpec::Parse("iid")->kind, PartitionSpec::Kind::kIid);
  EXPECT_DOUBLE_EQ(PartitionSpec::Parse("dirichlet:0.5")->alpha, 0.5);
  EXPECT_EQ(PartitionSpec::Parse("shards:3")->shards, 3);
  EXPECT_EQ(PartitionSpec::Parse("dirichlet:0.5")->ToString(), "dirichlet:0.5");
  EXPECT_THAT(PartitionSpec::Parse("random"), StatusIs(StatusCode::kInvalidArgument, "unknown partition 'random'"));
  EXPECT_THAT(PartitionSpec::Parse("dirichlet:-1"), StatusIs(StatusCode::kInvalidArgument, "positive"));
  EXPECT_THAT(PartitionSpec::Parse("shards:1.5"), StatusIs(StatusCode::kInvalidArgument, "integer"));
  EXPECT_THAT(PartitionSpec::Parse("shards:366666666666666666666666666"),
              StatusIs(StatusCode::kInvalidArgument, "from 1 to 2147483647"));
}

TEST(PartitionTest, IidIsBalancedAndCoversEverything) {
  auto parts = *PartitionIndices(Labels(1000), *PartitionSpec::Parse("iid"), 7, 1);
  ExpectExactCover(parts, 1000);
  for (const auto& p : parts) EXPECT_NEAR(p.size(), 1000.0 / 7, 1.0);
}

TEST(PartitionTest, SameSeedSamePartition) {
  for (const char* spec : {"iid", "dirichlet:0.3", "shards:2"}) {
    auto a = *PartitionIndices(Labels(2000), *PartitionSpec::Parse(spec), 10, 5);
    auto b = *PartitionIndices(Labels(2000), *PartitionSpec::Parse(spec), 10, 5);
    auto c = *PartitionIndices(Labels(2000), *PartitionSpec::Parse(spec), 10, 6);
    EXPECT_EQ(a, b) << spec;
    EXPECT_NE(a, c) << spec;
  }
}

TEST(PartitionTest, DirichletSkewsLabels) {
  auto parts = *PartitionIndices(Labels(5000), *PartitionSpec::Parse("dirichlet:0.1"), 10, 3);
  ExpectExactCover(parts, 5000);
  // With alpha = 0.1 a typical client is dominated by few classes.
  int skewed = 0;
  for (const auto& p : parts) {
    std::vector<int> hist(10);
    for (uint32_t i : p) hist[i % 10]++;
    skewed += *std::max_element(hist.begin(), hist.end()) > static_cast<int>(p.size()) / 3;
  }
  EXPECT_GE(skewed, 5);
}

TEST(PartitionTest, ShardsGiveFewClassesPerClient) {
  std::vector<uint8_t> labels = Labels(2000);
  auto parts = *PartitionIndices(labels, *PartitionSpec::Parse("shards:2"), 10, 3);
  ExpectExactCover(parts, 2000);
  for (const auto& p : parts) {
    std::set<int> classes;
    for (uint32_t i : p) classes.insert(labels[i]);
    EXPECT_LE(classes.size(), 4u);
  }
}

TEST(PartitionTest, RefusesImpossibleSplits) {
  EXPECT_THAT(PartitionIndices(Labels(5), *PartitionSpec::Parse("iid"), 6, 0),
              StatusIs(StatusCode::kInvalidArgument, "cannot split 5 examples among 6"));
  EXPECT_THAT(PartitionIndices(Labels(10), *PartitionSpec::Parse("shards:4"), 3, 0),
              StatusIs(StatusCode::kInvalidArgument, "12 shards do not fit"));
  EXPECT_THAT(PartitionIndices(Labels(10), *PartitionSpec::Parse("iid"), 0, 0),
              StatusIs(StatusCode::kInvalidArgument, "positive"));
}

TEST(SampledPartitionTest, DrawsWithReplacementReproduciblyPerClient) {
  const std::vector<uint8_t> labels = Labels(1000);
  const PartitionSpec iid = *PartitionSpec::Parse("iid");
  SampledPartition p = *SampledPartition::Make(labels, iid, 30, 7);
  EXPECT_EQ(p.For(999999).size(), 30u);
  EXPECT_EQ(p.For(5), SampledPartition::Make(labels, iid, 30, 7)->For(5));  // any process, same client, same data
  EXPECT_NE(p.For(5), p.For(6));
  for (uint32_t i : p.For(123456)) EXPECT_LT(i, 1000u);
  EXPECT_THAT(SampledPartition::Make(labels, iid, 0, 7).status(),
              ::plexus::testing::StatusIs(StatusCode::kInvalidArgument, "positive"));
  EXPECT_THAT(SampledPartition::Make({}, iid, 5, 7).status(),
              ::plexus::testing::StatusIs(StatusCode::kInvalidArgument, "empty"));
}

TEST(SampledPartitionTest, DirichletAndShardsSkewLabels) {
  const std::vector<uint8_t> labels = Labels(10000);
  auto classes_of = [&](const std::vector<uint32_t>& idx) {
    std::set<uint8_t> c;
    for (uint32_t i : idx) c.insert(labels[i]);
    return c.size();
  };
  SampledPartition dir = *SampledPartition::Make(labels, *PartitionSpec::Parse("dirichlet:0.05"), 200, 1);
  SampledPartition shards = *SampledPartition::Make(labels, *PartitionSpec::Parse("shards:2"), 200, 1);
  SampledPartition iid = *SampledPartition::Make(labels, *PartitionSpec::Parse("iid"), 200, 1);
  size_t dir_classes = 0, iid_classes = 0;
  for (uint64_t c = 0; c < 20; ++c) {
    dir_classes += classes_of(dir.For(c));
    iid_classes += classes_of(iid.For(c));
    EXPECT_LE(classes_of(shards.For(c)), 4u);  // two label-sorted runs of 100 span at most 2 classes each
  }
  EXPECT_LT(dir_classes, 20u * 4);
  EXPECT_EQ(iid_classes, 20u * 10);
}

}  // namespace
}  // namespace plexus
