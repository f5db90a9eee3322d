#include "compute/trainer.h"

#include <filesystem>

#include "compute/fashion_mnist.h"
#include "compute/model_zoo.h"
#include "compute/portable_trainer.h"
#include "compute/text_corpus.h"
#include "tests/compute/noise_data.h"
#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

class TrainerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(kDefaultFashionMnistDir)) return;
    train_ = new Dataset(*LoadFashionMnist(kDefaultFashionMnistDir, Split::kTrain));
    test_ = new Dataset(*LoadFashionMnist(kDefaultFashionMnistDir, Split::kTest));
  }
  static void TearDownTestSuite() {
    delete train_;
    delete test_;
  }
  void SetUp() override {
    if (!train_) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  }
  static Dataset* train_;
  static Dataset* test_;
};
Dataset* TrainerTest::train_ = nullptr;
Dataset* TrainerTest::test_ = nullptr;

TEST(ModelZooTest, BuiltInModelsAreRecognisedByLayoutAndDescribeTheirInput) {
  EXPECT_EQ(BuiltInModelOf(*InitModel("mlp", 3)), "mlp");
  EXPECT_EQ(BuiltInModelOf(*InitModel("cnn", 3)), "cnn");
  EXPECT_EQ(BuiltInModelOf(*ModelState::Create({{"w", {3}}})), "");
  const auto meta = BuiltInModelMetadata("mlp");
  EXPECT_EQ(meta.at("plexus.preprocess"), "(x / 255 - 0.2860) / 0.3530");
  EXPECT_EQ(meta.at("plexus.input_shape"), "784");
  EXPECT_EQ(BuiltInModelMetadata("cnn").at("plexus.input_shape"), "1,28,28");
}

TEST(ModelZooTest, LayoutsAndSeededInit) {
  ModelState mlp = *InitModel("mlp", 1);
  EXPECT_EQ(mlp.num_params(), 159010u);
  EXPECT_EQ(InitModel("cnn", 1)->num_params(), 421642u);
  EXPECT_EQ(mlp, *InitModel("mlp", 1));
  EXPECT_NE(mlp.ContentSha256(), InitModel("mlp", 2)->ContentSha256());
  // fc1 weights lie within +-1/sqrt(784).
  for (float x : mlp.tensor(0)) ASSERT_LE(std::abs(x), 1.0f / 28.0f);
  EXPECT_THAT(InitModel("resnet", 1), StatusIs(StatusCode::kInvalidArgument, "unknown model 'resnet'"));
}

TEST_F(TrainerTest, MlpLearnsFromASubset) {
  auto trainer = *MakeTorchTrainer("mlp", 1);
  ModelState start = *InitModel("mlp", 0);
  DatasetView train = DatasetView::Prefix(*train_, 3000);
  DatasetView test = DatasetView::Prefix(*test_, 2000);
  const double before = trainer->Evaluate(start, test)->accuracy;
  TrainOptions o;
  o.local_epochs = 1;
  Result<TrainOutcome> out = trainer->Train(start, train, o);
  ASSERT_OK(out);
  EXPECT_EQ(out->num_examples, 3000);
  EXPECT_EQ(out->steps, (3000 + 31) / 32);
  EXPECT_OK(out->weights.CheckSameLayout(start));
  const double after = trainer->Evaluate(out->weights, test)->accuracy;
  EXPECT_LT(before, 0.3);
  EXPECT_GT(after, 0.65);
}

TEST_F(TrainerTest, SameSeedSameWeightsAndLocalStepsAreExact) {
  auto trainer = *MakeTorchTrainer("mlp", 1);
  ModelState start = *InitModel("mlp", 0);
  DatasetView train = DatasetView::Prefix(*train_, 500);
  TrainOptions o;
  o.local_steps = 7;
  o.seed = 3;
  auto a = *trainer->Train(start, train, o);
  auto b = *trainer->Train(start, train, o);
  EXPECT_EQ(a.steps, 7);
  EXPECT_EQ(a.weights, b.weights);
  o.prox_mu = 0.5;
  auto c = *trainer->Train(start, train, o);
  EXPECT_NE(a.weights.ContentSha256(), c.weights.ContentSha256());
}

TEST_F(TrainerTest, CnnRunsAStep) {
  auto trainer = *MakeTorchTrainer("cnn", 1);
  TrainOptions o;
  o.local_steps = 2;
  auto out = trainer->Train(*InitModel("cnn", 0), DatasetView::Prefix(*train_, 64), o);
  ASSERT_OK(out);
  EXPECT_GT(out->mean_loss, 0.0);
}

TEST_F(TrainerTest, RefusesWrongModelAndEmptyData) {
  auto trainer = *MakeTorchTrainer("mlp", 1);
  EXPECT_THAT(trainer->Train(*InitModel("cnn", 0), DatasetView::Prefix(*train_, 10), TrainOptions()),
              StatusIs(StatusCode::kInvalidArgument, "model 'mlp'"));
  DatasetView empty;
  empty.data = train_;
  EXPECT_THAT(trainer->Evaluate(*InitModel("mlp", 0), empty), StatusIs(StatusCode::kInvalidArgument, "no examples"));
}

// `text` as windows of context + 1 bytes at a stride of `context`, as LoadTextCorpus cuts a file.
Dataset TextWindows(const std::string& text, int64_t context = kTextContext) {
  Dataset d;
  d.example_shape = {context + 1};
  for (int v = 0; v < 256; ++v) d.byte_values[static_cast<size_t>(v)] = static_cast<float>(v);
  const auto t = static_cast<size_t>(context);
  for (size_t at = 0; at + t + 1 <= text.size(); at += t) {
    d.feature_bytes.insert(d.feature_bytes.end(), text.begin() + static_cast<std::ptrdiff_t>(at),
                           text.begin() + static_cast<std::ptrdiff_t>(at + t + 1));
    d.labels.push_back(0);
  }
  return d;
}

TEST(ModelZooTest, TinyLmIsAByteLevelTransformerOfAboutAMillionParameters) {
  ModelState lm = *InitModel("tinylm", 1);
  EXPECT_EQ(lm.num_params(), 867072u);
  EXPECT_EQ(BuiltInModelOf(lm), "tinylm");
  EXPECT_TRUE(IsLanguageModel("tinylm"));
  EXPECT_FALSE(IsLanguageModel("mlp"));
  EXPECT_EQ(lm.tensors()[0].name, "tok_emb.weight");
  EXPECT_EQ(lm.tensors()[0].shape, std::vector<int64_t>({256, 128}));
  EXPECT_EQ(lm.tensors().back().name, "head.weight");
  // LayerNorms start at the identity, embeddings small.
  for (const TensorSlot& t : lm.tensors()) {
    std::span<const float> v = lm.data().subspan(t.offset, t.numel);
    if (t.name == "ln_f.weight") {
      EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](float x) { return x == 1.0f; }));
    }
    if (t.name == "ln_f.bias") {
      EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; }));
    }
    if (t.name == "tok_emb.weight") {
      EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](float x) { return std::abs(x) < 0.15f; }));
    }
  }
  EXPECT_EQ(BuiltInModelMetadata("tinylm").at("plexus.input_shape"), "64");
  EXPECT_THAT(MakePortableTrainer("tinylm"), StatusIs(StatusCode::kInvalidArgument, "needs LibTorch"));
}

TEST(TinyLmTest, LearnsAShortTextBelowItsUnigramBaselineWithAdamW) {
  std::string text;
  while (text.size() < 64 * 40 + 1) text += "the quick brown fox jumps over the lazy dog. ";
  const Dataset d = TextWindows(text);
  const double unigram = UnigramBitsPerChar(d);
  auto trainer = *MakeTorchTrainer("tinylm", 1);
  const ModelState start = *InitModel("tinylm", 0);
  // At the start every byte is about equally likely: about ln 256 nats per predicted byte.
  ASSERT_OK_AND_ASSIGN(Evaluation before, trainer->Evaluate(start, DatasetView::All(d)));
  EXPECT_NEAR(before.loss, std::log(256.0), 0.6);
  TrainOptions o;
  o.optimizer = "adamw";
  o.learning_rate = 3e-3;
  o.batch_size = 8;
  o.local_steps = 60;
  ASSERT_OK_AND_ASSIGN(TrainOutcome out, trainer->Train(start, DatasetView::All(d), o));
  ASSERT_OK_AND_ASSIGN(Evaluation after, trainer->Evaluate(out.weights, DatasetView::All(d)));
  EXPECT_LT(BitsPerChar(after.loss), unigram) << "unigram baseline " << unigram << " bits per character";
  EXPECT_GT(after.accuracy, 0.2);  // of the next byte, over every predicted position
  EXPECT_EQ(after.examples, static_cast<int64_t>(d.size()));
}

TEST(TinyLmTest, ImagesAndTextWindowsGoOnlyToTheirModels) {
  const Dataset text = TextWindows(std::string(200, 'x'));
  const Dataset images = NoiseData(4, 1);
  auto lm = *MakeTorchTrainer("tinylm", 1);
  auto mlp = *MakeTorchTrainer("mlp", 1);
  EXPECT_THAT(lm->Evaluate(*InitModel("tinylm", 0), DatasetView::All(images)),
              StatusIs(StatusCode::kInvalidArgument, "tinylm takes text windows of 65 bytes"));
  EXPECT_THAT(mlp->Evaluate(*InitModel("mlp", 0), DatasetView::All(text)),
              StatusIs(StatusCode::kInvalidArgument, "28x28 images"));
}

// AdamW's first step from zero moments is, bias-corrected, w - lr * g / (|g| + eps) after the
// decay w * (1 - lr * wd): every value with a gradient moves by the learning rate.
TEST(AdamWTest, TheFirstStepMovesEveryValueByTheLearningRateAfterTheDecay) {
  const Dataset d = NoiseData(16, 2);
  auto trainer = *MakeTorchTrainer("mlp", 1);
  const ModelState start = *InitModel("mlp", 0);
  TrainOptions o;
  o.optimizer = "adamw";
  o.learning_rate = 1e-3;
  o.weight_decay = 0.1;
  o.batch_size = 16;
  o.local_steps = 1;
  OptimizerState state;
  o.optimizer_state = &state;
  ASSERT_OK_AND_ASSIGN(TrainOutcome out, trainer->Train(start, DatasetView::All(d), o));
  size_t moved_by_lr = 0;
  for (size_t i = 0; i < start.num_params(); ++i) {
    const double decayed = static_cast<double>(start.data()[i]) * (1.0 - 1e-3 * 0.1);
    const double step = std::abs(static_cast<double>(out.weights.data()[i]) - decayed);
    ASSERT_LE(step, 1e-3 * (1 + 1e-4)) << "value " << i;
    if (step >= 1e-3 * 0.99) ++moved_by_lr;
  }
  EXPECT_GT(moved_by_lr, start.num_params() * 9 / 10);
  EXPECT_EQ(state.steps, 1);
  EXPECT_EQ(state.first_moment.size(), start.num_params());
  EXPECT_EQ(state.second_moment.size(), start.num_params());
}

// A client that keeps its moments continues its optimizer: two one-step tasks are one two-step
// task, bit for bit (one example, so every step sees the same batch).
TEST(AdamWTest, KeptMomentsCarryTheOptimizerAcrossTasks) {
  const Dataset d = NoiseData(1, 3);
  auto trainer = *MakeTorchTrainer("mlp", 1);
  const ModelState start = *InitModel("mlp", 0);
  TrainOptions o;
  o.optimizer = "adamw";
  o.learning_rate = 1e-3;
  o.batch_size = 1;
  o.local_steps = 2;
  ASSERT_OK_AND_ASSIGN(TrainOutcome whole, trainer->Train(start, DatasetView::All(d), o));
  o.local_steps = 1;
  OptimizerState state;
  o.optimizer_state = &state;
  ASSERT_OK_AND_ASSIGN(TrainOutcome first, trainer->Train(start, DatasetView::All(d), o));
  ASSERT_OK_AND_ASSIGN(TrainOutcome second, trainer->Train(first.weights, DatasetView::All(d), o));
  EXPECT_EQ(state.steps, 2);
  EXPECT_EQ(second.weights, whole.weights);
  // Without kept moments the second task starts afresh: another model.
  o.optimizer_state = nullptr;
  ASSERT_OK_AND_ASSIGN(TrainOutcome fresh, trainer->Train(first.weights, DatasetView::All(d), o));
  EXPECT_NE(fresh.weights.ContentSha256(), whole.weights.ContentSha256());
  // A state of another model's size is started afresh, not misread.
  OptimizerState other;
  other.steps = 5;
  other.first_moment.assign(3, 1.0f);
  other.second_moment.assign(3, 1.0f);
  o.optimizer_state = &other;
  ASSERT_OK_AND_ASSIGN(TrainOutcome restarted, trainer->Train(first.weights, DatasetView::All(d), o));
  EXPECT_EQ(restarted.weights, fresh.weights);
  EXPECT_EQ(other.steps, 1);
}

TEST(AdamWTest, UnknownOptimizersAreRefusedAndThePortableTrainerRunsSgdOnly) {
  const Dataset d = NoiseData(4, 4);
  TrainOptions o;
  o.optimizer = "lamb";
  EXPECT_THAT((*MakeTorchTrainer("mlp", 1))->Train(*InitModel("mlp", 0), DatasetView::All(d), o),
              StatusIs(StatusCode::kInvalidArgument, "optimizer 'lamb'"));
  o.optimizer = "adamw";
  EXPECT_THAT((*MakePortableTrainer("mlp"))->Train(*InitModel("mlp", 0), DatasetView::All(d), o),
              StatusIs(StatusCode::kInvalidArgument, "SGD with momentum only"));
}

}  // namespace
}  // namespace plexus
