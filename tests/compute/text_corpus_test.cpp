#include "compute/text_corpus.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "compute/data_files.h"
#include "tests/testing/scratch_dir_test_base.h"
#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;
using ::testing::ElementsAre;

class TextCorpusTest : public ::plexus::testing::ScratchDirTest {
 protected:
  std::string dir() const { return dir_.string(); }

  // The window's bytes as a string.
  static std::string Window(const Dataset& d, size_t k) {
    const auto per = static_cast<size_t>(d.features_per_example());
    return std::string(reinterpret_cast<const char*>(d.feature_bytes.data() + k * per), per);
  }
};

// 'a'..'z' over and over: window k of a file with context 4 starts at byte 4k.
std::string Alphabet(size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += static_cast<char>('a' + i % 26);
  return s;
}

TEST_F(TextCorpusTest, WindowsAreSplitByPositionAndLabelledByTheirFile) {
  Write("b_second", Alphabet(4 * 20 + 1));         // 20 windows of 5 bytes: 18 train, 2 validation (k = 9, 19)
  Write("a_first", Alphabet(4 * 10));              // 9 windows (the 10th would need one byte more): all train
  Write("a_first.dat", std::string("\0\1\2", 3));  // fortune's index: left out
  std::filesystem::create_symlink(dir_ / "a_first", dir_ / "a_first.u8");  // an alias: left out
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> files, TextCorpusFiles(dir()));
  EXPECT_THAT(files, ElementsAre((dir_ / "a_first").string(), (dir_ / "b_second").string()));

  ASSERT_OK_AND_ASSIGN(Dataset train, LoadTextCorpus(dir(), Split::kTrain, {}, /*context=*/4));
  ASSERT_OK_AND_ASSIGN(Dataset validation, LoadTextCorpus(dir(), Split::kTest, {}, /*context=*/4));
  EXPECT_EQ(train.size(), 9u + 18u);
  EXPECT_EQ(validation.size(), 2u);
  EXPECT_EQ(train.example_shape, std::vector<int64_t>({5}));
  EXPECT_EQ(train.num_classes, 2);
  EXPECT_EQ(Window(train, 0), "abcde");
  EXPECT_EQ(Window(train, 1), "efghi");  // windows share a byte: each byte is a target once
  EXPECT_EQ(train.labels[0], 0);
  EXPECT_EQ(train.labels[9], 1);  // the second file's first window
  // The second file's windows 9 and 19 (bytes 36.. and 76..) are the validation split.
  EXPECT_EQ(Window(validation, 0), Alphabet(41).substr(36, 5));
  EXPECT_EQ(Window(validation, 1), Alphabet(81).substr(76, 5));
  EXPECT_THAT(validation.labels, ElementsAre(1, 1));
  // A byte reads as its value.
  float x[5];
  train.CopyExample(0, x);
  EXPECT_EQ(x[0], static_cast<float>('a'));
  EXPECT_EQ(x[4], static_cast<float>('e'));
}

TEST_F(TextCorpusTest, TheSelectorPicksWindowsByTheirSourceLabels) {
  Write("a", Alphabet(4 * 5 + 1));
  Write("b", std::string(4 * 5 + 1, 'z'));
  // Keep the second file's windows only, as a partition by source would.
  ASSERT_OK_AND_ASSIGN(Dataset d, LoadTextCorpus(
                                      dir(), Split::kTrain,
                                      [](const std::vector<uint8_t>& labels) -> Result<std::vector<uint32_t>> {
                                        std::vector<uint32_t> keep;
                                        for (uint32_t k = 0; k < labels.size(); ++k) {
                                          if (labels[k] == 1) keep.push_back(k);
                                        }
                                        return keep;
                                      },
                                      /*context=*/4));
  ASSERT_EQ(d.size(), 5u);
  for (size_t k = 0; k < d.size(); ++k) EXPECT_EQ(Window(d, k), "zzzzz");
  EXPECT_THAT(
      LoadTextCorpus(
          dir(), Split::kTrain,
          [](const std::vector<uint8_t>&) { return Result<std::vector<uint32_t>>(std::vector<uint32_t>{99}); }, 4),
      StatusIs(StatusCode::kInvalidArgument, "example 99"));
}

TEST_F(TextCorpusTest, AFolderOfTextIsReadAsACorpusByDataFiles) {
  Write("only", Alphabet(64 * 12 + 1));
  EXPECT_TRUE(IsTextCorpus(dir()));
  DataFileOptions o;
  ASSERT_OK_AND_ASSIGN(Dataset train, LoadDataFile(dir(), o));
  o.split = Split::kTest;
  ASSERT_OK_AND_ASSIGN(Dataset validation, LoadDataFile(dir(), o));
  EXPECT_EQ(train.size(), 11u);  // the default context, 64 bytes: 12 windows, the 10th validation
  EXPECT_EQ(validation.size(), 1u);
  EXPECT_EQ(train.features_per_example(), kTextContext + 1);
}

TEST_F(TextCorpusTest, BadCorporaAreRefusedWithTheReason) {
  EXPECT_THAT(LoadTextCorpus((dir_ / "missing").string(), Split::kTrain),
              StatusIs(StatusCode::kNotFound, "not a folder"));
  EXPECT_THAT(LoadTextCorpus(dir(), Split::kTrain), StatusIs(StatusCode::kInvalidArgument, "holds no text files"));
  Write("short", "too short");
  EXPECT_THAT(LoadTextCorpus(dir(), Split::kTrain),
              StatusIs(StatusCode::kInvalidArgument, "has no training window of 65 bytes"));
  Write("binary", std::string("ab\0cd", 5));
  EXPECT_FALSE(IsTextCorpus(dir()));
  EXPECT_THAT(LoadTextCorpus(dir(), Split::kTrain), StatusIs(StatusCode::kInvalidArgument, "holds a NUL byte"));
  EXPECT_THAT(LoadTextCorpus(dir(), Split::kTrain, {}, 0), StatusIs(StatusCode::kInvalidArgument, "at least one"));
}

TEST_F(TextCorpusTest, UnigramBaselineIsTheEntropyOfThePredictedBytes) {
  Write("ab", std::string(4 * 10 + 1, 'a') + std::string(4 * 10, 'b'));  // windows of 5: 20 windows
  ASSERT_OK_AND_ASSIGN(Dataset d, LoadTextCorpus(dir(), Split::kTrain, {}, 4));
  // 18 training windows: 9 of "aaaaa", 1 of "abbbb" (k = 10: bytes 40..44), 8 of "bbbbb"; their
  // predicted bytes (the last four of each): 36 a, 36 b, one bit each.
  ASSERT_EQ(d.size(), 18u);
  EXPECT_NEAR(UnigramBitsPerChar(d), 1.0, 1e-12);
  EXPECT_EQ(UnigramBitsPerChar(Dataset{}), 0.0);
  EXPECT_NEAR(BitsPerChar(std::log(2.0)), 1.0, 1e-15);
}

}  // namespace
}  // namespace plexus
