#include "simulations/task_wire.h"

#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

TEST(TaskWireTest, AJobTravelsWhole) {
  TrainJob job;
  job.options.local_steps = 7;
  job.options.batch_size = 32;
  job.options.learning_rate = 0.05;
  job.options.seed = 99;
  job.flip_labels = true;
  job.indices = {3, 1, 4, 1, 5};
  uint64_t key = 0;
  TrainJob back;
  ASSERT_TRUE(DecodeJob(EncodeJob(42, job), &key, &back));
  EXPECT_EQ(key, 42u);
  EXPECT_EQ(back.options.local_steps, 7);
  EXPECT_EQ(back.options.batch_size, 32);
  EXPECT_DOUBLE_EQ(back.options.learning_rate, 0.05);
  EXPECT_EQ(back.options.seed, 99u);
  EXPECT_TRUE(back.flip_labels);
  EXPECT_EQ(back.indices, job.indices);
}

TEST(TaskWireTest, EveryTruncationOrExtensionOfAJobIsRefused) {
  TrainJob job;
  job.indices = {1, 2, 3};
  const std::string bytes = EncodeJob(1, job);
  uint64_t key = 0;
  TrainJob back;
  for (size_t n = 0; n < bytes.size(); ++n) EXPECT_FALSE(DecodeJob(bytes.substr(0, n), &key, &back)) << n;
  EXPECT_FALSE(DecodeJob(bytes + "x", &key, &back));
}

TEST(TaskWireTest, AFetchIsOneKey) {
  uint64_t key = 0;
  ASSERT_TRUE(DecodeFetch(EncodeFetch(77), &key));
  EXPECT_EQ(key, 77u);
  EXPECT_FALSE(DecodeFetch(EncodeFetch(77) + "x", &key));
  EXPECT_FALSE(DecodeFetch("abc", &key));
}

TEST(TaskWireTest, OutcomesAndErrorsTravelAndMalformedOnesAreRefused) {
  TrainOutcome outcome;
  outcome.weights = *ModelState::Create({{"w", {3}}});
  outcome.weights.data()[1] = 2.5f;
  outcome.num_examples = 10;
  outcome.steps = 4;
  outcome.mean_loss = 0.75;
  Result<TrainOutcome> back = DecodeOutcome(EncodeOutcome(outcome), 1);
  ASSERT_OK(back);
  EXPECT_EQ(back->weights.data()[1], 2.5f);
  EXPECT_EQ(back->num_examples, 10);
  EXPECT_EQ(back->steps, 4);
  EXPECT_DOUBLE_EQ(back->mean_loss, 0.75);
  EXPECT_THAT(DecodeOutcome(EncodeOutcome(Status(StatusCode::kAborted, "training diverged")), 3),
              StatusIs(StatusCode::kAborted, "training rank 3: training diverged"));
  const std::string bytes = EncodeOutcome(outcome);
  for (size_t n = 0; n < bytes.size(); n += 7) EXPECT_FALSE(DecodeOutcome(bytes.substr(0, n), 2).ok()) << n;
}

}  // namespace
}  // namespace plexus
