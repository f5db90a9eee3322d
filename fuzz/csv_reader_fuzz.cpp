// libFuzzer target: CSV text as users' data files hold it (`--data FILE.csv`). Whatever records it
// reads must read back the same once written again with CsvField; a reader error must leave it at
// the end.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "core/csv_reader.h"

namespace {

// Every record of `text`; false when the reader refused it.
bool ReadAll(std::string_view text, std::vector<std::vector<std::string>>* records) {
  plexus::CsvReader reader(text);
  std::vector<std::string> fields;
  while (true) {
    plexus::Result<bool> more = reader.Next(&fields);
    if (!more.ok()) {
      plexus::Result<bool> after = reader.Next(&fields);
      if (!after.ok() || *after) std::abort();  // an error leaves the reader at the end
      return false;
    }
    if (!*more) return true;
    records->push_back(fields);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<std::vector<std::string>> records;
  if (!ReadAll(text, &records)) return 0;
  std::string written;
  for (const std::vector<std::string>& record : records) {
    for (size_t i = 0; i < record.size(); ++i) written += (i ? "," : "") + plexus::CsvField(record[i]);
    written += "\n";
  }
  std::vector<std::vector<std::string>> again;
  if (!ReadAll(written, &again) || again != records) std::abort();
  return 0;
}
