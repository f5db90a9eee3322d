#include "compute/trainer.h"

#include <filesystem>

#include "compute/fashion_mnist.h"
#include "compute/model_zoo.h"
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

}  // namespace
}  // namespace plexus
