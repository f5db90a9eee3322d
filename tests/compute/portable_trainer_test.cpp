#include "compute/portable_trainer.h"

#include <gtest/gtest.h>

#include <cmath>

#include "compute/model_zoo.h"
#include "core/rng.h"
#include "tests/compute/noise_data.h"
#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

TEST(PortableTrainer, GivesTheSameBitsEveryTime) {
  const Dataset data = NoiseData(64, 9);
  TrainOptions o;
  o.local_steps = 4;
  o.batch_size = 16;
  o.seed = 2;
  auto a = MakePortableTrainer("mlp");
  auto b = MakePortableTrainer("mlp");
  ASSERT_OK(a);
  ASSERT_OK(b);
  const ModelState start = *InitModel("mlp", 1);
  auto x = (*a)->Train(start, DatasetView::All(data), o);
  auto y = (*b)->Train(start, DatasetView::All(data), o);
  ASSERT_OK(x);
  ASSERT_OK(y);
  EXPECT_EQ(x->weights.ContentSha256(), y->weights.ContentSha256());
}

// The portable trainer's promise: the same bits on every architecture. The hashes below were
// computed on x86-64; the aarch64 and riscv64 builds run this test under qemu
// (scripts/cross-build.sh) and must reproduce them. The data are made from integers only, so
// that nothing but the trainer's own arithmetic could differ.
TEST(PortableTrainer, KnownBitsOnEveryArchitecture) {
  Dataset data;
  Rng rng(77);
  data.labels.resize(96);
  data.features.resize(96 * 784);
  for (size_t i = 0; i < data.labels.size(); ++i) data.labels[i] = static_cast<uint8_t>(rng.NextU64() % 10);
  for (float& p : data.features) p = static_cast<float>(rng.NextU64() % 256) / 255.0f;
  TrainOptions o;
  o.local_steps = 3;
  o.batch_size = 32;
  o.learning_rate = 0.05;
  o.momentum = 0.9;
  o.seed = 5;
  for (const auto& [model, expected] :
       {std::pair<std::string, std::string>{"mlp", "38a55e2b10792258842b5b86fd419346dad1107a886cff7cd42067953577d9f1"},
        std::pair<std::string, std::string>{"cnn",
                                            "ac2adaed347c15c94951edb8565c2f33ac2e9ead1ad03dae40f12f20383affaf"}}) {
    auto trainer = MakePortableTrainer(model);
    ASSERT_OK(trainer);
    auto out = (*trainer)->Train(*InitModel(model, 3), DatasetView::All(data), o);
    ASSERT_OK(out);
    EXPECT_EQ(out->weights.ContentSha256(), expected) << model;
  }
}

TEST(PortableTrainer, RefusesUnknownModelsAndWrongLayouts) {
  EXPECT_THAT(MakePortableTrainer("resnet"), testing::StatusIs(StatusCode::kInvalidArgument, "unknown model"));
  auto t = MakePortableTrainer("mlp");
  ASSERT_OK(t);
  const Dataset data = NoiseData(10, 1);
  EXPECT_THAT((*t)->Train(*InitModel("cnn", 1), DatasetView::All(data), TrainOptions{}),
              testing::StatusIs(StatusCode::kInvalidArgument, ""));
}

}  // namespace
}  // namespace plexus
