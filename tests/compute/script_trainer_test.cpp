// The fixtures are TorchScript files written by PyTorch (fixtures/make_script_models.py).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "compute/script_model.h"
#include "core/rng.h"
#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::string kSmall = std::string(PLEXUS_FIXTURE_DIR) + "/small_bn_net.pt";
const std::string kWider = std::string(PLEXUS_FIXTURE_DIR) + "/wider_net.pt";

// 4 features, 3 classes: the class is which of the first three features is largest.
Dataset Learnable(size_t n, uint64_t seed) {
  Dataset d;
  d.example_shape = {4};
  d.num_classes = 3;
  Rng rng(seed);
  for (size_t i = 0; i < n; ++i) {
    float best = -1e9f;
    uint8_t label = 0;
    for (uint8_t c = 0; c < 4; ++c) {
      const auto v = static_cast<float>(rng.Normal()) * 3.0f + 5.0f;  // not centred: BatchNorm has work
      d.features.push_back(v);
      if (c < 3 && v > best) {
        best = v;
        label = c;
      }
    }
    d.labels.push_back(label);
  }
  return d;
}

std::vector<std::string> Names(const ModelState& m) {
  std::vector<std::string> out;
  for (const TensorSlot& t : m.tensors()) out.push_back(t.name);
  return out;
}

TEST(ScriptModelTest, ReadsParametersThenFloatingPointBuffers) {
  Result<ScriptModelInfo> info = ReadScriptModel(kSmall);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_THAT(Names(info->initial), ElementsAre("fc1.weight", "fc1.bias", "bn.weight", "bn.bias", "fc2.weight",
                                                "fc2.bias", "bn.running_mean", "bn.running_var"));
  EXPECT_THAT(info->buffers, ElementsAre("bn.running_mean", "bn.running_var"));
  EXPECT_THAT(info->initial.tensors()[0].shape, ElementsAre(16, 4));
  EXPECT_EQ(info->initial.tensor(7)[0], 1.0f);  // running_var starts at one
  EXPECT_TRUE(IsScriptModelName(info->name));
  Result<ScriptModelInfo> wider = ReadScriptModel(kWider);
  ASSERT_TRUE(wider.ok());
  EXPECT_NE(wider->name, info->name);
  EXPECT_EQ(ReadScriptModel(kSmall)->name, info->name);
  EXPECT_THAT(DescribeLayoutDifference(wider->initial, info->initial),
              HasSubstr("fc1.weight: [32, 4] here, [16, 4] there"));
  EXPECT_TRUE(IsScriptModelPath("a/b.pt"));
  EXPECT_FALSE(IsScriptModelPath("mlp"));
}

TEST(ScriptModelTest, RefusesFilesThatAreNotTorchScript) {
  const std::string path = (std::filesystem::temp_directory_path() / "plexus_not_a_module.pt").string();
  std::ofstream(path) << "import torch\n";
  EXPECT_THAT(ReadScriptModel(path).status(),
              StatusIs(StatusCode::kInvalidArgument, "'" + path + "' is not a TorchScript module"));
  EXPECT_THAT(ReadScriptModel("/nonexistent/m.pt").status(), StatusIs(StatusCode::kNotFound, ""));
  std::filesystem::remove(path);
}

TEST(ScriptTrainerTest, LearnsAndUpdatesBatchNormStatistics) {
  Result<ScriptModelInfo> info = ReadScriptModel(kSmall);
  ASSERT_TRUE(info.ok());
  Result<std::unique_ptr<Trainer>> trainer = MakeScriptTrainer(kSmall, {});
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  const Dataset train = Learnable(2000, 1), test = Learnable(500, 2);
  Result<Evaluation> before = (*trainer)->Evaluate(info->initial, DatasetView::All(test));
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  TrainOptions o;
  o.local_epochs = 5;
  o.learning_rate = 0.05;
  Result<TrainOutcome> out = (*trainer)->Train(info->initial, DatasetView::All(train), o);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->num_examples, 2000);
  Result<Evaluation> after = (*trainer)->Evaluate(out->weights, DatasetView::All(test));
  ASSERT_TRUE(after.ok());
  EXPECT_GT(after->accuracy, 0.85);
  EXPECT_GT(after->accuracy, before->accuracy + 0.3);
  float moved = 0;  // running_mean left zero behind
  for (float m : out->weights.tensor(6)) moved = std::max(moved, std::abs(m));
  EXPECT_GT(moved, 0.1f);

  // The same seed gives the same weights.
  Result<TrainOutcome> again = (*MakeScriptTrainer(kSmall, {}))->Train(info->initial, DatasetView::All(train), o);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->weights, out->weights);
}

// The docs' BatchNorm example with a partition one larger than a multiple of the batch size: the
// last example joins the batch before it instead of failing as a batch of one (it did, blaming
// --input-shape). A client with a single example gets an error that says so.
TEST(ScriptTrainerTest, ALastBatchOfOneJoinsTheBatchBeforeIt) {
  Result<ScriptModelInfo> info = ReadScriptModel(kSmall);
  ASSERT_TRUE(info.ok());
  Result<std::unique_ptr<Trainer>> trainer = MakeScriptTrainer(kSmall, {});
  ASSERT_TRUE(trainer.ok());
  TrainOptions o;
  o.local_epochs = 2;
  o.batch_size = 32;
  EXPECT_EQ(StepsPerEpoch(o, 65), 3);  // the built-in models keep their batches
  o.join_single_last_batch = true;
  EXPECT_EQ(StepsPerEpoch(o, 65), 2);
  EXPECT_EQ(BatchRange(o, 65, 1), (std::pair<int64_t, int64_t>{32, 65}));
  EXPECT_EQ(StepsPerEpoch(o, 66), 3);
  EXPECT_EQ(BatchRange(o, 66, 2), (std::pair<int64_t, int64_t>{64, 66}));
  EXPECT_EQ(StepsPerEpoch(o, 1), 1);
  o.join_single_last_batch = false;  // the TorchScript trainer sets it itself
  const Dataset train = Learnable(65, 3);
  Result<TrainOutcome> out = (*trainer)->Train(info->initial, DatasetView::All(train), o);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->steps, 4);
  EXPECT_EQ(out->num_examples, 65);
  const Dataset one = Learnable(1, 4);
  EXPECT_THAT((*trainer)->Train(info->initial, DatasetView::All(one), o).status(),
              StatusIs(StatusCode::kInvalidArgument, "a batch of one example"));
}

TEST(ScriptTrainerTest, LocalBuffersStayWithTheClient) {
  Result<ScriptModelInfo> info = ReadScriptModel(kSmall);
  ASSERT_TRUE(info.ok());
  ScriptTrainerOptions local;
  local.local_buffers = true;
  std::unique_ptr<Trainer> trainer = std::move(MakeScriptTrainer(kSmall, local)).value();
  const Dataset train = Learnable(1000, 3);
  TrainOptions o;
  o.learning_rate = 0.05;
  Result<TrainOutcome> out = trainer->Train(info->initial, DatasetView::All(train), o);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  // The update carries the federation's buffers unchanged ...
  EXPECT_EQ(out->weights.tensor(6)[0], info->initial.tensor(6)[0]);
  EXPECT_EQ(out->weights.tensor(7)[0], info->initial.tensor(7)[0]);
  // ... while this client evaluates with its own statistics. In training BatchNorm normalizes with
  // each batch's statistics, so a trainer that federates its buffers learns the same parameters
  // and ends with the statistics the local trainer kept: both evaluate alike. A trainer with the
  // federation's (initial) buffers evaluates the same parameters differently.
  Result<TrainOutcome> shared = (*MakeScriptTrainer(kSmall, {}))->Train(info->initial, DatasetView::All(train), o);
  ASSERT_TRUE(shared.ok());
  EXPECT_EQ(shared->weights.tensor(0)[0], out->weights.tensor(0)[0]);
  EXPECT_NE(shared->weights.tensor(6)[0], out->weights.tensor(6)[0]);
  const Dataset test = Learnable(500, 4);
  Result<Evaluation> own = trainer->Evaluate(out->weights, DatasetView::All(test));
  Result<Evaluation> same = (*MakeScriptTrainer(kSmall, {}))->Evaluate(shared->weights, DatasetView::All(test));
  Result<Evaluation> global = (*MakeScriptTrainer(kSmall, {}))->Evaluate(out->weights, DatasetView::All(test));
  ASSERT_TRUE(own.ok() && same.ok() && global.ok());
  EXPECT_DOUBLE_EQ(own->loss, same->loss);
  EXPECT_NE(own->loss, global->loss);
}

TEST(ScriptTrainerTest, RefusesDataTheModelCannotTake) {
  Result<ScriptModelInfo> info = ReadScriptModel(kSmall);
  ASSERT_TRUE(info.ok());
  std::unique_ptr<Trainer> trainer = std::move(MakeScriptTrainer(kSmall, {})).value();
  Dataset five = Learnable(10, 5);
  five.example_shape = {5};
  five.features.resize(50);
  EXPECT_THAT(trainer->Evaluate(info->initial, DatasetView::All(five)).status(),
              StatusIs(StatusCode::kInvalidArgument, "cannot take examples of shape [5]"));
  Dataset many_classes = Learnable(10, 5);
  many_classes.num_classes = 7;
  EXPECT_THAT(trainer->Train(info->initial, DatasetView::All(many_classes), {}).status(),
              StatusIs(StatusCode::kInvalidArgument, "has 3 outputs, but the data has labels up to 6"));
  Result<ScriptModelInfo> wider = ReadScriptModel(kWider);
  EXPECT_THAT(trainer->Train(wider->initial, DatasetView::All(Learnable(10, 5)), {}).status(),
              StatusIs(StatusCode::kInvalidArgument, ""));
}

TEST(ScriptTrainerTest, RegressionTrainsOnMeanSquaredErrorAndReportsRSquared) {
  Result<ScriptModelInfo> info = ReadScriptModel(kSmall);
  ASSERT_TRUE(info.ok());
  // Three targets per example, each a linear function of the four features (the module has three
  // outputs).
  const auto make = [](size_t n, uint64_t seed) {
    Dataset d = Learnable(n, seed);
    d.num_classes = 1;
    d.target_width = 3;
    for (size_t i = 0; i < n; ++i) {
      const float* x = &d.features[4 * i];
      d.targets.push_back(x[0] - x[1]);
      d.targets.push_back(0.5f * x[2] + x[3]);
      d.targets.push_back(x[0] + x[1] + x[2] - 15.0f);
      d.labels[i] = 0;
    }
    return d;
  };
  const Dataset train = make(2000, 11), test = make(500, 12);
  ScriptTrainerOptions mse;
  mse.mse = true;
  std::unique_ptr<Trainer> trainer = std::move(MakeScriptTrainer(kSmall, mse)).value();
  Result<Evaluation> before = trainer->Evaluate(info->initial, DatasetView::All(test));
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  TrainOptions o;
  o.local_epochs = 5;
  o.learning_rate = 0.01;
  Result<TrainOutcome> out = trainer->Train(info->initial, DatasetView::All(train), o);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_GT(out->mean_loss, 0.0);
  Result<Evaluation> after = trainer->Evaluate(out->weights, DatasetView::All(test));
  ASSERT_TRUE(after.ok());
  EXPECT_LT(after->loss, before->loss / 10) << "mean squared error";
  EXPECT_GT(after->accuracy, 0.9) << "R^2";
  EXPECT_LT(before->accuracy, 0.5);
  // Class labels for a regression, and targets for a classifier, are refused.
  EXPECT_THAT(trainer->Train(info->initial, DatasetView::All(Learnable(10, 1)), o).status(),
              StatusIs(StatusCode::kInvalidArgument, "needs real-valued targets"));
  EXPECT_THAT((*MakeScriptTrainer(kSmall, {}))->Train(info->initial, DatasetView::All(train), o).status(),
              StatusIs(StatusCode::kInvalidArgument, "train with --loss mse"));
  Dataset one = make(10, 1);
  one.target_width = 1;
  one.targets.resize(10);
  EXPECT_THAT(trainer->Evaluate(info->initial, DatasetView::All(one)).status(),
              StatusIs(StatusCode::kInvalidArgument, "the data has 1 target(s) per example"));
}

TEST(ScriptTrainerTest, ExportWritesTheWeightsIntoTheModule) {
  Result<ScriptModelInfo> info = ReadScriptModel(kSmall);
  ASSERT_TRUE(info.ok());
  ModelState weights = info->initial;
  for (size_t i = 0; i < weights.num_params(); ++i) weights.data()[i] = 0.001f * static_cast<float>(i);
  const std::string out = (std::filesystem::temp_directory_path() / "plexus_export_test.pt").string();
  ASSERT_TRUE(WriteScriptModel(kSmall, weights, out, {{"plexus.input_shape", "4"}}).ok());
  Result<ScriptModelInfo> back = ReadScriptModel(out);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->initial, weights);
  EXPECT_EQ(back->name, info->name);
  EXPECT_THAT(WriteScriptModel(kWider, weights, out, {}), StatusIs(StatusCode::kInvalidArgument, "does not fit"));
  std::filesystem::remove(out);
}

}  // namespace
}  // namespace plexus
