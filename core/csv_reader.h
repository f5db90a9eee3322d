// CsvReader: the records of a CSV text as RFC 4180 defines them. Fields are separated by commas
// and records by line breaks (LF or CRLF); a field in double quotes may hold commas, line breaks
// and quotes (written twice: "" is one "). Two leniencies beyond the RFC, for files written by
// hand or by spreadsheets: spaces and tabs around a field are dropped (inside quotes they are
// kept), and blank lines are skipped rather than read as records of one empty field.
//
// Borrows the text, which must outlive the reader. Thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace plexus {

class CsvReader {
 public:
  explicit CsvReader(std::string_view text) : rest_(text) {}

  // Reads the next record into *fields (resized to its number of fields; their strings are reused,
  // so a caller reading many records allocates little). False once the text is exhausted.
  // InvalidArgument, naming the line and the field, for a quote that is never closed or a
  // character other than a comma or a line break after a closing quote; the reader then stays at
  // the end (every later call returns false).
  Result<bool> Next(std::vector<std::string>* fields);

  // The line (1-based) the record last read starts on; a quoted line break makes a record span
  // several lines.
  int64_t record_line() const { return record_line_; }

 private:
  std::string_view rest_;
  int64_t line_ = 1;  // the line rest_ starts on
  int64_t record_line_ = 0;
};

// `field` as a CSV field that CsvReader reads back as it is: unchanged when it is not empty and
// holds no comma, quote or line break and no space, tab or carriage return at either end (which the
// reader would drop); otherwise in quotes, with its quotes doubled. (An empty field is quoted so
// that a record of one empty field is not a blank line.)
std::string CsvField(std::string_view field);

}  // namespace plexus
