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

}  // namespace
}  // namespace plexus
