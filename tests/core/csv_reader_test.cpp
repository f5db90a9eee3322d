#include "core/csv_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;
using ::testing::ElementsAre;

// Every record of `text`, or the first error.
Result<std::vector<std::vector<std::string>>> ReadAll(std::string_view text) {
  CsvReader reader(text);
  std::vector<std::vector<std::string>> records;
  std::vector<std::string> fields;
  while (true) {
    PLEXUS_ASSIGN_OR_RETURN(bool more, reader.Next(&fields));
    if (!more) return records;
    records.push_back(fields);
  }
}

TEST(CsvReaderTest, QuotedFieldsHoldCommasQuotesAndLineBreaks) {
  Result<std::vector<std::vector<std::string>>> r =
      ReadAll("\"weight, kg\",\"say \"\"hi\"\"\",label\n\"1,5\",\"two\nlines\",3\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_THAT(*r, ElementsAre(ElementsAre("weight, kg", "say \"hi\"", "label"), ElementsAre("1,5", "two\nlines", "3")));
}

TEST(CsvReaderTest, CrlfBlanksAndEmptyFields) {
  Result<std::vector<std::vector<std::string>>> r = ReadAll("a, b ,c\r\n\r\n  \n1,,\"\"\r\n\" x \" ,2,3");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_THAT(*r, ElementsAre(ElementsAre("a", "b", "c"), ElementsAre("1", "", ""), ElementsAre(" x ", "2", "3")));
}

TEST(CsvReaderTest, RecordLinesCountQuotedLineBreaks) {
  CsvReader reader("h\n\"a\nb\"\n\nc\n");
  std::vector<std::string> fields;
  std::vector<int64_t> lines;
  while (true) {
    Result<bool> more = reader.Next(&fields);
    ASSERT_TRUE(more.ok()) << more.status().ToString();
    if (!*more) break;
    lines.push_back(reader.record_line());
  }
  EXPECT_THAT(lines, ElementsAre(1, 2, 5));
}

TEST(CsvReaderTest, BrokenQuotesAreErrorsNamingTheLineAndField) {
  EXPECT_THAT(
      ReadAll("a,b\n1,\"open\n2,3\n").status(),
      StatusIs(StatusCode::kInvalidArgument, "line 2, field 2: the quote that opens this field is never closed"));
  EXPECT_THAT(ReadAll("a,b\n\"x\"y,1\n").status(),
              StatusIs(StatusCode::kInvalidArgument, "line 2, field 1: 'y' after the closing quote"));
  CsvReader reader("\"x\"y\nz\n");
  std::vector<std::string> fields;
  EXPECT_FALSE(reader.Next(&fields).ok());
  Result<bool> after = reader.Next(&fields);  // the reader stays at the end after an error
  ASSERT_TRUE(after.ok());
  EXPECT_FALSE(*after);
}

TEST(CsvReaderTest, FieldsAreQuotedOnlyWhenTheyNeedIt) {
  EXPECT_EQ(CsvField("1.5"), "1.5");
  EXPECT_EQ(CsvField("1,5"), "\"1,5\"");
  EXPECT_EQ(CsvField("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(CsvField(" padded"), "\" padded\"");
  EXPECT_EQ(CsvField(""), "\"\"");
}

}  // namespace
}  // namespace plexus
