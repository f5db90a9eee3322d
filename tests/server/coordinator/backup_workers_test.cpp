#include "server/coordinator/backup_workers.h"

#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

const std::vector<std::string> kFour = {"a", "b", "c", "d"};

TEST(BackupWorkersTest, NoneAndStatic) {
  EXPECT_EQ(BackupWorkers::Parse("none")->UpdatesToWaitFor(kFour, 2), 4u);
  EXPECT_EQ(BackupWorkers::Parse("static:b=1")->UpdatesToWaitFor(kFour, 2), 3u);
  EXPECT_EQ(BackupWorkers::Parse("static:b=3")->UpdatesToWaitFor(kFour, 2), 2u);  // never below the floor
  EXPECT_THAT(BackupWorkers::Parse("static:b=-1").status(), StatusIs(StatusCode::kInvalidArgument, "static:b=<count>"));
  EXPECT_THAT(BackupWorkers::Parse("dbw").status(), StatusIs(StatusCode::kInvalidArgument, "dynamic"));
}

TEST(BackupWorkersTest, DynamicWaitsForEveryoneUntilItKnowsMore) {
  BackupWorkers w = *BackupWorkers::Parse("dynamic");
  EXPECT_EQ(w.UpdatesToWaitFor(kFour, 1), 4u);
  for (const char* id : {"a", "b", "c"}) w.ObserveDuration(id, 100);
  w.ObserveDuration("d", 1000);
  EXPECT_EQ(w.UpdatesToWaitFor(kFour, 1), 4u);                        // durations, but no noise ratio yet
  w.ObserveRound(/*mean_update_sq_norm=*/2.0, /*step_sq_norm=*/1.0);  // r = 1
  // gain(k) / time(k): k = 3 gives (3/4) / 100, k = 4 only (4/5) / 1000.
  EXPECT_EQ(w.UpdatesToWaitFor(kFour, 1), 3u);
  EXPECT_EQ(w.UpdatesToWaitFor({"a", "b", "c", "e"}, 1), 4u);  // "e" never measured
}

TEST(BackupWorkersTest, DynamicWaitsLongerWhenUpdatesAreNoisyAndTimesClose) {
  BackupWorkers w = *BackupWorkers::Parse("dynamic");
  w.ObserveDuration("a", 100);
  w.ObserveDuration("b", 100);
  w.ObserveDuration("c", 100);
  w.ObserveDuration("d", 130);
  w.ObserveRound(1.0, 1.0);                     // r = 0: no noise, the fastest alone is best per unit time
  EXPECT_EQ(w.UpdatesToWaitFor(kFour, 1), 3u);  // ties between 1..3 go to the larger k
  w.ObserveRound(101.0, 1.0);                   // r = 100: every extra update is worth its 30% longer wait
  EXPECT_EQ(w.UpdatesToWaitFor(kFour, 1), 4u);
}

TEST(BackupWorkersTest, CancelledTasksCountAsAtLeastThatSlow) {
  BackupWorkers w = *BackupWorkers::Parse("dynamic");
  for (const char* id : {"a", "b", "c", "d"}) w.ObserveDuration(id, 100);
  w.ObserveCancelled("d", 5000);
  w.ObserveRound(2.0, 1.0);
  EXPECT_EQ(w.UpdatesToWaitFor(kFour, 1), 3u);
}

}  // namespace
}  // namespace plexus
