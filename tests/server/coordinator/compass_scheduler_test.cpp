#include "server/coordinator/compass_scheduler.h"

#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using Arrival = CompassScheduler::Arrival;

// Measures two clients at 1 and 4 ms per local step: their first tasks (q_max = 100 steps each,
// no group) start at 0 and end at 100 and 400.
CompassScheduler Measured() {
  CompassScheduler s(CompassOptions{});
  EXPECT_EQ(s.Assign("fast", 0), 100);
  EXPECT_EQ(s.Assign("slow", 0), 100);
  EXPECT_EQ(s.Arrive("fast", 100).kind, Arrival::kUngrouped);
  EXPECT_EQ(s.Arrive("slow", 400).kind, Arrival::kUngrouped);
  return s;
}

TEST(CompassSchedulerTest, FirstTaskRunsQmaxAloneAndMeasuresSpeed) {
  CompassScheduler s = Measured();
  for (const auto& c : s.Clients()) {
    ASSERT_TRUE(c.ms_per_step.has_value());
    EXPECT_DOUBLE_EQ(*c.ms_per_step, c.client_id == "fast" ? 1.0 : 4.0);
    EXPECT_EQ(c.group, 0u);
  }
  EXPECT_EQ(s.open_groups(), 0u);
}

TEST(CompassSchedulerTest, SlowerClientsGetFewerStepsAndArriveWithTheirGroup) {
  CompassScheduler s = Measured();
  EXPECT_EQ(s.Assign("fast", 400), 100);  // opens a group expected at 500, latest 550
  EXPECT_EQ(s.Assign("slow", 400), 25);   // joins it: 25 steps x 4 ms also end at 500
  EXPECT_EQ(s.open_groups(), 1u);
  const auto first = s.Arrive("fast", 500);
  EXPECT_EQ(first.kind, Arrival::kOnTime);
  EXPECT_FALSE(first.group_complete);
  const auto second = s.Arrive("slow", 502);
  EXPECT_EQ(second.kind, Arrival::kOnTime);
  EXPECT_EQ(second.group, first.group);
  EXPECT_TRUE(second.group_complete);
}

TEST(CompassSchedulerTest, ArrivalsAfterTheLatestTimeAreLate) {
  CompassScheduler s = Measured();
  s.Assign("fast", 400);
  s.Assign("slow", 400);
  EXPECT_TRUE(s.Overdue(549).empty());
  ASSERT_EQ(s.Overdue(550).size(), 1u);
  EXPECT_EQ(s.Arrive("slow", 551).kind, Arrival::kLate);
  // Once the group is closed, its remaining member is late too.
  s.Close(s.Overdue(551)[0]);
  EXPECT_EQ(s.Arrive("fast", 552).kind, Arrival::kLate);
  EXPECT_EQ(s.open_groups(), 0u);
}

TEST(CompassSchedulerTest, TooSlowForAnyGroupOpensOneTimedToMerge) {
  CompassScheduler s = Measured();
  s.Assign("crawler", 0);
  s.Arrive("crawler", 5000);  // 50 ms per step
  s.Assign("fast", 5000);     // group expected at 5100, latest 5150
  // Joining would allow floor(100 / 50) = 2 < q_min steps, so a new group is opened, aimed at
  // 5150 + 1 x 100 (the fast member's next return): 5 steps, raised to q_min.
  EXPECT_EQ(s.Assign("crawler", 5000), 20);
  EXPECT_EQ(s.open_groups(), 2u);
}

TEST(CompassSchedulerTest, AbandonedTaskLeavesItsGroup) {
  CompassScheduler s = Measured();
  s.Assign("fast", 400);
  s.Assign("slow", 400);
  s.Abandon("slow");
  EXPECT_TRUE(s.Arrive("fast", 500).group_complete);
}

TEST(CompassOptionsTest, ValidateNamesTheBadField) {
  CompassOptions o;
  o.q_min = 0;
  EXPECT_THAT(o.Validate(), ::plexus::testing::StatusIs(StatusCode::kInvalidArgument, "q-min"));
  o = CompassOptions{};
  o.q_max = 10;
  EXPECT_THAT(o.Validate(), ::plexus::testing::StatusIs(StatusCode::kInvalidArgument, "q-max"));
  o = CompassOptions{};
  o.latest_time_factor = 0.5;
  EXPECT_THAT(o.Validate(), ::plexus::testing::StatusIs(StatusCode::kInvalidArgument, "latest-time-factor"));
}

}  // namespace
}  // namespace plexus
