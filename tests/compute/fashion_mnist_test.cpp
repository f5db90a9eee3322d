#include "compute/fashion_mnist.h"

#include <zlib.h>

#include <filesystem>

#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

std::string Be32(uint32_t v) { return {char(v >> 24), char(v >> 16), char(v >> 8), char(v)}; }

std::string Images(uint32_t n, uint32_t rows, uint32_t cols) {
  std::string s = Be32(0x803) + Be32(n) + Be32(rows) + Be32(cols);
  for (uint32_t i = 0; i < n * rows * cols; ++i) s += char(i % 256);
  return s;
}

std::string Labels(uint32_t n) {
  std::string s = Be32(0x801) + Be32(n);
  for (uint32_t i = 0; i < n; ++i) s += char(i % 10);
  return s;
}

void WriteGz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

TEST(FashionMnistTest, ParsesIdx) {
  Result<Dataset> d = ParseIdx(Images(3, 28, 28), Labels(3));
  ASSERT_OK(d);
  EXPECT_EQ(d->size(), 3u);
  EXPECT_EQ(d->labels[2], 2);
  // Kept as bytes; each reads as the normalized pixel (pixel/255 - mean) / std, as floats did.
  EXPECT_TRUE(d->features.empty());
  ASSERT_EQ(d->feature_bytes.size(), 3u * 784);
  const std::string images = Images(3, 28, 28);
  std::vector<float> x(784);
  d->CopyExample(1, x.data());
  for (size_t i = 0; i < 784; ++i) {
    const auto pixel = static_cast<uint8_t>(images[16 + 784 + i]);
    ASSERT_EQ(x[i], (static_cast<float>(pixel) / 255.0f - 0.2860f) / 0.3530f) << i;
  }
  d->KeepFirst(2);
  EXPECT_EQ(d->size(), 2u);
  EXPECT_EQ(d->feature_bytes.size(), 2u * 784);
}

TEST(FashionMnistTest, RefusesBrokenFiles) {
  EXPECT_THAT(ParseIdx("xx", Labels(1)), StatusIs(StatusCode::kDataLoss, "IDX3"));
  EXPECT_THAT(ParseIdx(Images(2, 28, 28), Labels(3)), StatusIs(StatusCode::kDataLoss, "disagree"));
  std::string truncated = Images(2, 28, 28);
  truncated.pop_back();
  EXPECT_THAT(ParseIdx(truncated, Labels(2)), StatusIs(StatusCode::kDataLoss, "truncated"));
  std::string bad_label = Labels(2);
  bad_label.back() = 42;
  EXPECT_THAT(ParseIdx(Images(2, 28, 28), bad_label), StatusIs(StatusCode::kDataLoss, "label 42"));
}

TEST(FashionMnistTest, ReadsGzippedFilesFromADirectory) {
  const auto dir = std::filesystem::temp_directory_path() / "plexus_fmnist_test";
  std::filesystem::create_directories(dir);
  WriteGz((dir / "t10k-images-idx3-ubyte.gz").string(), Images(5, 28, 28));
  WriteGz((dir / "t10k-labels-idx1-ubyte.gz").string(), Labels(5));
  Result<Dataset> d = LoadFashionMnist(dir.string(), Split::kTest);
  ASSERT_OK(d);
  EXPECT_EQ(d->size(), 5u);
  EXPECT_THAT(LoadFashionMnist(dir.string(), Split::kTrain), StatusIs(StatusCode::kNotFound, "train-images"));
  std::filesystem::remove_all(dir);
}

TEST(FashionMnistTest, MissingDirectoryIsAClearError) {
  EXPECT_THAT(LoadFashionMnist("/nonexistent/plexus-data", Split::kTrain),
              StatusIs(StatusCode::kNotFound, "data directory '/nonexistent/plexus-data' does not exist"));
}

TEST(FashionMnistTest, DebianPackageLoads) {
  if (!std::filesystem::exists(kDefaultFashionMnistDir)) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  Result<Dataset> d = LoadFashionMnist(kDefaultFashionMnistDir, Split::kTest);
  ASSERT_OK(d);
  EXPECT_EQ(d->size(), 10000u);
}

}  // namespace
}  // namespace plexus
