// The law CSV files rest on: records written field by field with CsvField read back as they were.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <string>
#include <vector>

#include "core/csv_reader.h"

namespace plexus {
namespace {

RC_GTEST_PROP(CsvReaderProperties, WrittenRecordsReadBackAsTheyWere, ()) {
  // Fields from an alphabet rich in what CSV must escape.
  const auto field = rc::gen::container<std::string>(rc::gen::element(' ', '\t', '\r', '\n', ',', '"', 'a', '1', '.'));
  const auto records = *rc::gen::resize(20, rc::gen::container<std::vector<std::vector<std::string>>>(rc::gen::nonEmpty(
                                                rc::gen::container<std::vector<std::string>>(field))));
  const bool crlf = *rc::gen::arbitrary<bool>();
  std::string text;
  for (const std::vector<std::string>& record : records) {
    for (size_t i = 0; i < record.size(); ++i) text += (i ? "," : "") + CsvField(record[i]);
    text += crlf ? "\r\n" : "\n";
  }
  CsvReader reader(text);
  std::vector<std::vector<std::string>> read;
  std::vector<std::string> fields;
  while (true) {
    Result<bool> more = reader.Next(&fields);
    RC_ASSERT(more.ok());
    if (!*more) break;
    read.push_back(fields);
  }
  RC_ASSERT(read == records);
}

}  // namespace
}  // namespace plexus
