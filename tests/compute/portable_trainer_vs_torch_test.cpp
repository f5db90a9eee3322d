// The portable trainer against LibTorch on the same data, start and options (builds with LibTorch
// only).
#include <gtest/gtest.h>

#include "compute/model_zoo.h"
#include "compute/portable_trainer.h"
#include "compute/trainer.h"
#include "tests/compute/noise_data.h"
#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

struct Case {
  std::string model;
  int64_t steps;
  double prox_mu;
  double tolerance;
};

class PortableTrainerTest : public ::testing::TestWithParam<Case> {};

TEST_P(PortableTrainerTest, MatchesLibTorch) {
  const Case& c = GetParam();
  const Dataset data = NoiseData(96, 3);
  const DatasetView view = DatasetView::All(data);
  ModelState start = *InitModel(c.model, 11);
  TrainOptions o;
  o.local_steps = c.steps;
  o.batch_size = 32;
  o.learning_rate = 0.05;
  o.momentum = 0.9;
  o.prox_mu = c.prox_mu;
  o.seed = 5;
  auto torch = MakeTorchTrainer(c.model, 1);
  auto portable = MakePortableTrainer(c.model);
  ASSERT_OK(torch);
  ASSERT_OK(portable);
  auto expected = (*torch)->Train(start, view, o);
  auto got = (*portable)->Train(start, view, o);
  ASSERT_OK(expected);
  ASSERT_OK(got);
  EXPECT_GT(MaxDifference(got->weights, start), 1e-4) << "nothing was trained";
  EXPECT_LE(MaxDifference(got->weights, expected->weights), c.tolerance);
  EXPECT_NEAR(got->mean_loss, expected->mean_loss, 1e-5);
  EXPECT_EQ(got->steps, expected->steps);
  EXPECT_EQ(got->num_examples, expected->num_examples);

  auto eval_expected = (*torch)->Evaluate(got->weights, view);
  auto eval_got = (*portable)->Evaluate(got->weights, view);
  ASSERT_OK(eval_expected);
  ASSERT_OK(eval_got);
  EXPECT_DOUBLE_EQ(eval_got->accuracy, eval_expected->accuracy);
  EXPECT_NEAR(eval_got->loss, eval_expected->loss, 1e-5);
}

// One step is the criterion (1e-5 per parameter); more steps with momentum and the
// proximal term drift a little further apart through rounding.
INSTANTIATE_TEST_SUITE_P(Models, PortableTrainerTest,
                         ::testing::Values(Case{"mlp", 1, 0.0, 1e-5}, Case{"cnn", 1, 0.0, 1e-5},
                                           Case{"mlp", 6, 0.01, 1e-4}),
                         [](const auto& info) {
                           return info.param.model + "_" + std::to_string(info.param.steps) + "_steps";
                         });

}  // namespace
}  // namespace plexus
