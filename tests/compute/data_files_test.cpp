#include "compute/data_files.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "tests/testing/scratch_dir_test_base.h"
#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;
using ::testing::ElementsAre;

class DataFilesTest : public ::plexus::testing::ScratchDirTest {
 protected:
  // A safetensors file of F32 `x` [n, 2] and I64 `y` [n] (or the given y dtype and bytes).
  static std::string Safetensors(const std::vector<float>& x, const std::vector<int64_t>& y,
                                 const std::string& x_name = "x") {
    const size_t xb = x.size() * 4, yb = y.size() * 8;
    std::string header = "{\"" + x_name + "\":{\"dtype\":\"F32\",\"shape\":[" + std::to_string(y.size()) +
                         ",2],\"data_offsets\":[0," + std::to_string(xb) + "]},\"y\":{\"dtype\":\"I64\",\"shape\":[" +
                         std::to_string(y.size()) + "],\"data_offsets\":[" + std::to_string(xb) + "," +
                         std::to_string(xb + yb) + "]}}";
    std::string out(8, '\0');
    uint64_t len = header.size();
    std::memcpy(out.data(), &len, 8);
    out += header;
    out.append(reinterpret_cast<const char*>(x.data()), xb);
    out.append(reinterpret_cast<const char*>(y.data()), yb);
    return out;
  }
};

TEST_F(DataFilesTest, ReadsACsvWithTheLabelInAnyColumn) {
  const std::string path = Write("d.csv", "a,label,b\n1.5,2,-3\n0,0,4e1\n\n7,1,8\n");
  Result<Dataset> d = LoadDataFile(path, {});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_THAT(d->example_shape, ElementsAre(2));
  EXPECT_THAT(d->features, ElementsAre(1.5f, -3.0f, 0.0f, 40.0f, 7.0f, 8.0f));
  EXPECT_THAT(d->labels, ElementsAre(2, 0, 1));
  EXPECT_EQ(d->num_classes, 3);
}

TEST_F(DataFilesTest, ReadsQuotedCsvFieldsAndCrlfLinesAsRfc4180Says) {
  // A spreadsheet's export: quoted header names holding commas and quotes, CRLF line ends.
  const std::string path =
      Write("sheet.csv", "\"weight, kg\",\"label\",\"a \"\"b\"\"\"\r\n\"1.5\",2,-3\r\n0,\"0\",4e1\r\n");
  Result<Dataset> d = LoadDataFile(path, {});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_THAT(d->features, ElementsAre(1.5f, -3.0f, 0.0f, 40.0f));
  EXPECT_THAT(d->labels, ElementsAre(2, 0));
  // A decimal comma in quotes is one cell, refused as not a number (not a ragged row).
  EXPECT_THAT(LoadDataFile(Write("comma.csv", "a,b,label\n1,\"1,5\",0\n"), {}).status(),
              StatusIs(StatusCode::kInvalidArgument, "comma.csv:2, column 2: '1,5' is not a number"));
  EXPECT_THAT(LoadDataFile(Write("open.csv", "a,b,label\n1,\"2,0\n"), {}).status(),
              StatusIs(StatusCode::kInvalidArgument, "open.csv: line 2, field 2: the quote that opens this field"));
}

TEST_F(DataFilesTest, CsvErrorsNameTheFileLineAndColumn) {
  EXPECT_THAT(LoadDataFile(Write("ragged.csv", "a,b,label\n1,2,0\n1,2\n"), {}).status(),
              StatusIs(StatusCode::kInvalidArgument, "ragged.csv:3: 2 cells, the header has 3"));
  EXPECT_THAT(LoadDataFile(Write("text.csv", "a,b,label\n1,x2,0\n"), {}).status(),
              StatusIs(StatusCode::kInvalidArgument, "text.csv:2, column 2: 'x2' is not a number"));
  EXPECT_THAT(LoadDataFile(Write("nan.csv", "a,b,label\n1,nan,0\n"), {}).status(),
              StatusIs(StatusCode::kInvalidArgument, "nan.csv:2, column 2: feature nan is not a finite"));
  EXPECT_THAT(LoadDataFile(Write("neg.csv", "a,b,label\n1,2,-1\n"), {}).status(),
              StatusIs(StatusCode::kInvalidArgument, "neg.csv:2: label -1 is not a class index"));
  EXPECT_THAT(LoadDataFile(Write("frac.csv", "a,b,label\n1,2,0.5\n"), {}).status(),
              StatusIs(StatusCode::kInvalidArgument, "label 0.5"));
  EXPECT_THAT(LoadDataFile(Write("big.csv", "a,b,label\n1,2,256\n"), {}).status(),
              StatusIs(StatusCode::kInvalidArgument, "label 256"));
  EXPECT_THAT(LoadDataFile(Write("nolabel.csv", "a,b,c\n1,2,3\n"), {}).status(),
              StatusIs(StatusCode::kInvalidArgument, "no column 'label'"));
  EXPECT_THAT(LoadDataFile(Write("empty.csv", "a,label\n"), {}).status(),
              StatusIs(StatusCode::kInvalidArgument, "holds no examples"));
  EXPECT_THAT(LoadDataFile((dir_ / "missing.csv").string(), {}).status(), StatusIs(StatusCode::kNotFound, ""));
  EXPECT_THAT(LoadDataFile(Write("d.txt", "a,label\n1,0\n"), {}).status(),
              StatusIs(StatusCode::kInvalidArgument, "expected a .csv file"));
}

TEST_F(DataFilesTest, TheLabelColumnAndInputShapeAreOptions) {
  DataFileOptions o;
  o.label_column = "class";
  o.input_shape = {2, 2};
  Result<Dataset> d = LoadDataFile(Write("d.csv", "class,a,b,c,d\n1,1,2,3,4\n"), o);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_THAT(d->example_shape, ElementsAre(2, 2));
  o.input_shape = {3};
  EXPECT_THAT(LoadDataFile(Write("d.csv", "class,a,b,c,d\n1,1,2,3,4\n"), o).status(),
              StatusIs(StatusCode::kInvalidArgument, "the input shape holds 3 values, an example has 4"));
}

TEST_F(DataFilesTest, ReadsSafetensorsFilesAndFoldersOfThem) {
  Result<Dataset> d = LoadDataFile(Write("a.safetensors", Safetensors({1, 2, 3, 4}, {0, 4})), {});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_THAT(d->example_shape, ElementsAre(2));
  EXPECT_THAT(d->features, ElementsAre(1, 2, 3, 4));
  EXPECT_THAT(d->labels, ElementsAre(0, 4));
  EXPECT_EQ(d->num_classes, 5);

  std::filesystem::create_directories(dir_ / "parts");
  Write("parts/2.safetensors", Safetensors({5, 6}, {1}));
  Write("parts/1.safetensors", Safetensors({7, 8}, {2}));
  Result<Dataset> folder = LoadDataFile((dir_ / "parts").string(), {});
  ASSERT_TRUE(folder.ok()) << folder.status().ToString();
  EXPECT_THAT(folder->features, ElementsAre(7, 8, 5, 6));  // in name order
  EXPECT_THAT(folder->labels, ElementsAre(2, 1));
}

TEST_F(DataFilesTest, SafetensorsErrorsNameTheFileAndTensor) {
  EXPECT_THAT(LoadDataFile(Write("nox.safetensors", Safetensors({1, 2}, {0}, "features")), {}).status(),
              StatusIs(StatusCode::kInvalidArgument, "nox.safetensors: no tensor 'x' (it holds: features"));
  EXPECT_THAT(LoadDataFile(Write("nan.safetensors", Safetensors({1, NAN}, {0})), {}).status(),
              StatusIs(StatusCode::kInvalidArgument, "non-finite value (example 0)"));
  EXPECT_THAT(LoadDataFile(Write("label.safetensors", Safetensors({1, 2}, {300})), {}).status(),
              StatusIs(StatusCode::kInvalidArgument, "'y'[0]: label 300"));
  std::string truncated = Safetensors({1, 2, 3, 4}, {0, 1});
  truncated.resize(truncated.size() - 3);
  EXPECT_THAT(LoadDataFile(Write("short.safetensors", truncated), {}).status(),
              StatusIs(StatusCode::kInvalidArgument, "do not match its shape"));
  EXPECT_THAT(LoadDataFile(Write("junk.safetensors", "\xff\xff\xff\xff\xff\xff\xff\xff{}"), {}).status(),
              StatusIs(StatusCode::kInvalidArgument, "header length"));
}

TEST_F(DataFilesTest, SelectionAndHoldOutKeepExamplesWhole) {
  const std::string path = Write("d.csv", "a,b,label\n0,0,0\n1,1,1\n2,2,0\n3,3,1\n4,4,0\n");
  Result<Dataset> some =
      LoadDataFile(path, {}, [](const std::vector<uint8_t>& labels) -> Result<std::vector<uint32_t>> {
        EXPECT_EQ(labels.size(), 5u);
        return std::vector<uint32_t>{4, 1};
      });
  ASSERT_TRUE(some.ok());
  EXPECT_THAT(some->features, ElementsAre(4, 4, 1, 1));
  EXPECT_THAT(some->labels, ElementsAre(0, 1));
  EXPECT_EQ(some->num_classes, 2);  // of the whole file

  Result<Dataset> all = LoadDataFile(path, {});
  Result<HeldOut> split = HoldOut(*all, 0.4, 9);
  ASSERT_TRUE(split.ok());
  EXPECT_EQ(split->held_out.size(), 2u);
  EXPECT_EQ(split->kept.size(), 3u);
  for (const Dataset* part : {&split->kept, &split->held_out}) {
    for (size_t i = 0; i < part->size(); ++i) {  // each example's features still match its label
      EXPECT_EQ(part->features[2 * i], part->features[2 * i + 1]);
      EXPECT_EQ(static_cast<int>(part->features[2 * i]) % 2, part->labels[i]);
    }
  }
  EXPECT_EQ(HoldOut(*all, 0.4, 9)->held_out.features, split->held_out.features);  // seeded
  EXPECT_THAT(HoldOut(*all, 1.0, 9).status(), StatusIs(StatusCode::kInvalidArgument, ""));
}

// Examples kept as bytes (Fashion-MNIST's, e.g. `plexus client --federated-eval-split`) are held
// out as bytes, each with its own label and the same byte table.
TEST_F(DataFilesTest, HoldOutKeepsExamplesStoredAsBytes) {
  Dataset d;
  d.example_shape = {2};
  for (int v = 0; v < 256; ++v) d.byte_values[v] = static_cast<float>(v) * 0.5f;
  for (uint8_t i = 0; i < 10; ++i) {
    d.feature_bytes.push_back(i);
    d.feature_bytes.push_back(static_cast<uint8_t>(100 + i));
    d.labels.push_back(i % 2);
  }
  Result<HeldOut> split = HoldOut(d, 0.3, 5);
  ASSERT_TRUE(split.ok());
  EXPECT_EQ(split->kept.size() + split->held_out.size(), 10u);
  for (const Dataset* part : {&split->kept, &split->held_out}) {
    EXPECT_TRUE(part->features.empty());
    ASSERT_EQ(part->feature_bytes.size(), 2 * part->size());
    for (size_t i = 0; i < part->size(); ++i) {
      float x[2];
      part->CopyExample(i, x);
      EXPECT_EQ(x[1], x[0] + 50.0f);                               // the example whole
      EXPECT_EQ(static_cast<int>(x[0] * 2) % 2, part->labels[i]);  // with its label
    }
  }
}

TEST_F(DataFilesTest, RegressionReadsRealValuedTargets) {
  DataFileOptions o;
  o.regression = true;
  o.label_column = "y";
  Result<Dataset> d = LoadDataFile(Write("r.csv", "a,y\n1,0.25\n2,-3.5\n"), o);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->target_width, 1);
  EXPECT_THAT(d->targets, ElementsAre(0.25f, -3.5f));
  EXPECT_THAT(d->labels, ElementsAre(0, 0));
  EXPECT_THAT(LoadDataFile(Write("nan.csv", "a,y\n1,nan\n"), o).status(),
              StatusIs(StatusCode::kInvalidArgument, "nan.csv:2, column 2: target nan is not a finite"));
  // safetensors: y of integers is read as targets too; selection keeps each example's target.
  o.label_column = "label";
  Result<Dataset> s = LoadDataFile(Write("r.safetensors", Safetensors({1, 2, 3, 4, 5, 6}, {7, 8, 9})), o,
                                   [](const std::vector<uint8_t>&) -> Result<std::vector<uint32_t>> {
                                     return std::vector<uint32_t>{2, 0};
                                   });
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_THAT(s->targets, ElementsAre(9.0f, 7.0f));
  EXPECT_THAT(s->features, ElementsAre(5, 6, 1, 2));
}

TEST(InputShapeTest, ParsesPositiveDimensions) {
  EXPECT_THAT(*ParseInputShape("1,28,28"), ElementsAre(1, 28, 28));
  EXPECT_THAT(*ParseInputShape("784"), ElementsAre(784));
  EXPECT_FALSE(ParseInputShape("1,,2").ok());
  EXPECT_FALSE(ParseInputShape("0").ok());
  EXPECT_FALSE(ParseInputShape("a").ok());
}

}  // namespace
}  // namespace plexus
