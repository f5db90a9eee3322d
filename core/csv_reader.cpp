#include "core/csv_reader.h"

namespace plexus {
namespace {

bool Blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

std::string_view TrimBlanks(std::string_view s) {
  while (!s.empty() && Blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && Blank(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

Result<bool> CsvReader::Next(std::vector<std::string>* fields) {
  // Blank lines (nothing but spaces, tabs and carriage returns) are no records.
  while (true) {
    size_t i = 0;
    while (i < rest_.size() && Blank(rest_[i])) ++i;
    if (i == rest_.size()) {
      rest_ = {};
      return false;
    }
    if (rest_[i] != '\n') break;
    rest_.remove_prefix(i + 1);
    ++line_;
  }
  record_line_ = line_;
  const std::string_view text = rest_;
  const auto fail = [this](int64_t line, size_t field, const std::string& what) -> Status {
    rest_ = {};
    return InvalidArgumentError("line " + std::to_string(line) + ", field " + std::to_string(field) + ": " + what);
  };
  size_t n = 0;    // fields read
  size_t pos = 0;  // in text
  while (true) {
    if (fields->size() <= n) fields->emplace_back();
    std::string& field = (*fields)[n++];
    field.clear();
    size_t start = pos;
    while (start < text.size() && (text[start] == ' ' || text[start] == '\t')) ++start;
    if (start < text.size() && text[start] == '"') {
      const int64_t opened_on = line_;
      pos = start + 1;
      while (true) {
        if (pos >= text.size()) return fail(opened_on, n, "the quote that opens this field is never closed");
        const char c = text[pos++];
        if (c == '"') {
          if (pos < text.size() && text[pos] == '"') {  // "" is one quote
            field += '"';
            ++pos;
            continue;
          }
          break;
        }
        if (c == '\n') ++line_;
        field += c;
      }
      while (pos < text.size() && Blank(text[pos])) ++pos;
      if (pos < text.size() && text[pos] != ',' && text[pos] != '\n') {
        return fail(line_, n,
                    std::string("'") + text[pos] +
                        "' after the closing quote (a quote inside a quoted field is written twice: \"\")");
      }
    } else {
      size_t end = text.find_first_of(",\n", pos);
      if (end == std::string_view::npos) end = text.size();
      field.assign(TrimBlanks(text.substr(pos, end - pos)));
      pos = end;
    }
    if (pos >= text.size()) {
      rest_ = {};
      break;
    }
    if (text[pos] == ',') {
      ++pos;
      continue;
    }
    rest_ = text.substr(pos + 1);  // the record's line break
    ++line_;
    break;
  }
  fields->resize(n);
  return true;
}

std::string CsvField(std::string_view field) {
  const bool plain = !field.empty() && field.find_first_of(",\"\n\r") == std::string_view::npos &&
                     field.front() != ' ' && field.front() != '\t' && field.back() != ' ' && field.back() != '\t';
  if (plain) return std::string(field);
  std::string quoted = "\"";
  for (char c : field) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  quoted += '"';
  return quoted;
}

}  // namespace plexus
