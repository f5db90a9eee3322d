#include "aggregators/registry.h"

#include "aggregators/strategy_spec.h"
#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

TEST(RegistryTest, UnknownNameListsKnownOnes) {
  EXPECT_THAT(MakeAggregator("fedmagic", nullptr),
              StatusIs(StatusCode::kInvalidArgument,
                       "unknown strategy 'fedmagic' (known: bulyan, centered_clip, dare, demo, diloco, dp_fedavg, "
                       "dp_ftrl, fedadagrad"));
}

TEST(RegistryTest, UnknownParameterIsNamed) {
  EXPECT_THAT(MakeAggregator("fedavg:momentum=0.9", nullptr),
              StatusIs(StatusCode::kInvalidArgument, "no parameter 'momentum' (it takes: exact, weighted)"));
  EXPECT_THAT(MakeAggregator("fedavg:weighted=maybe", nullptr),
              StatusIs(StatusCode::kInvalidArgument, "not true/false"));
}

TEST(StrategySpecTest, ParsesNameAndParameters) {
  StrategySpec s = *StrategySpec::Parse("trimmed_mean:beta=0.1,x=2");
  EXPECT_EQ(s.name(), "trimmed_mean");
  EXPECT_DOUBLE_EQ(*s.GetDouble("beta", 0), 0.1);
  EXPECT_DOUBLE_EQ(*s.GetDouble("absent", 5), 5);
  EXPECT_THAT(s.CheckAllUsed(), StatusIs(StatusCode::kInvalidArgument, "no parameter 'x'"));
  EXPECT_THAT(StrategySpec::Parse("a:b"), StatusIs(StatusCode::kInvalidArgument, "not key=value"));
  EXPECT_THAT(StrategySpec::Parse("a:b=1,b=2"), StatusIs(StatusCode::kInvalidArgument, "twice"));
  EXPECT_THAT(StrategySpec::Parse(":b=1"), StatusIs(StatusCode::kInvalidArgument, "no name"));
  StrategySpec bad = *StrategySpec::Parse("x:lr=abc");
  EXPECT_THAT(bad.GetDouble("lr", 1), StatusIs(StatusCode::kInvalidArgument, "not a number"));
}

TEST(StrategySpecTest, CountsAreNonNegativeAndWithinTheRangeAsked) {
  StrategySpec s = *StrategySpec::Parse("x:n=5,neg=-1,huge=1000000000000");
  EXPECT_EQ(*s.GetCount("n", 0), 5);
  EXPECT_EQ(*s.GetCount("n", 0, 5, 5), 5);                    // the bounds are inclusive
  EXPECT_EQ(*s.GetCount("absent", 7, 10, 20), 7);             // the fallback is the caller's
  EXPECT_EQ(*s.GetCount("huge", 0), int64_t{1000000000000});  // unbounded by default
  EXPECT_THAT(s.GetCount("neg", 0), StatusIs(StatusCode::kInvalidArgument, "not a non-negative integer"));
  EXPECT_THAT(s.GetCount("n", 0, 6, 10), StatusIs(StatusCode::kInvalidArgument, "n=5 must be between 6 and 10"));
  EXPECT_THAT(s.GetCount("huge", 0, 1, 1000),
              StatusIs(StatusCode::kInvalidArgument, "huge=1000000000000 must be between 1 and 1000"));
}

}  // namespace
}  // namespace plexus
