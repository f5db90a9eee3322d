#include "compute/data_files.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <sstream>

#include "compute/text_corpus.h"
#include "core/csv_reader.h"
#include "core/file_contents.h"
#include "core/rng.h"

namespace plexus {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kMaxLabel = 255;  // labels are kept as uint8

// A number as strtod reads it (std::from_chars for doubles is missing from some standard
// libraries we build with), refusing trailing characters. The cell is the reader's string, which
// strtod reads in place (no copy per cell).
bool ParseNumber(const std::string& cell, double* out) {
  if (cell.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(cell.c_str(), &end);
  return end == cell.c_str() + cell.size();
}

Status CheckLabel(double value, const std::string& where) {
  if (!(value >= 0 && value <= kMaxLabel && value == std::floor(value))) {
    std::ostringstream v;
    v << value;
    return InvalidArgumentError(where + ": label " + v.str() + " is not a class index (an integer in [0, " +
                                std::to_string(kMaxLabel + 1) + "))");
  }
  return Status::Ok();
}

Result<Dataset> LoadCsv(const std::string& path, const DataFileOptions& o) {
  PLEXUS_ASSIGN_OR_RETURN(std::string text, ReadFileContents(path));
  Dataset d;
  CsvReader reader(text);
  std::vector<std::string> cells;
  size_t columns = 0;
  size_t label_at = 0;
  while (true) {
    Result<bool> more = reader.Next(&cells);
    if (!more.ok()) return InvalidArgumentError(path + ": " + more.status().message());
    if (!*more) break;
    const std::string where = path + ":" + std::to_string(reader.record_line());
    if (columns == 0) {  // the header
      columns = cells.size();
      const auto label = std::find(cells.begin(), cells.end(), o.label_column);
      if (label == cells.end()) {
        return InvalidArgumentError(where + ": the header has no column '" + o.label_column +
                                    "' (name the label column with --label-column)");
      }
      if (columns < 2) return InvalidArgumentError(where + ": the header names no feature column");
      label_at = static_cast<size_t>(label - cells.begin());
      continue;
    }
    if (cells.size() != columns) {
      return InvalidArgumentError(where + ": " + std::to_string(cells.size()) + " cells, the header has " +
                                  std::to_string(columns));
    }
    for (size_t c = 0; c < columns; ++c) {
      double value = 0;
      if (!ParseNumber(cells[c], &value)) {
        return InvalidArgumentError(where + ", column " + std::to_string(c + 1) + ": '" + cells[c] +
                                    "' is not a number");
      }
      if (c == label_at) {
        if (o.regression) {
          if (!std::isfinite(value) || std::abs(value) > 3.4e38) {
            return InvalidArgumentError(where + ", column " + std::to_string(c + 1) + ": target " + cells[c] +
                                        " is not a finite float32");
          }
          d.targets.push_back(static_cast<float>(value));
          d.labels.push_back(0);
          continue;
        }
        PLEXUS_RETURN_IF_ERROR(CheckLabel(value, where));
        d.labels.push_back(static_cast<uint8_t>(value));
        continue;
      }
      if (!std::isfinite(value) || std::abs(value) > 3.4e38) {
        return InvalidArgumentError(where + ", column " + std::to_string(c + 1) + ": feature " + cells[c] +
                                    " is not a finite float32");
      }
      d.features.push_back(static_cast<float>(value));
    }
  }
  if (columns == 0) return InvalidArgumentError(path + ": empty (a header line and examples expected)");
  d.example_shape = {static_cast<int64_t>(columns - 1)};
  if (o.regression) d.target_width = 1;
  return d;
}

// One tensor of a safetensors file, converted to doubles.
struct StoredTensor {
  std::vector<int64_t> shape;
  std::vector<double> values;
  bool integral = false;
};

template <typename T>
void Convert(const char* bytes, size_t count, std::vector<double>* out) {
  out->resize(count);
  for (size_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, bytes + i * sizeof(T), sizeof(T));
    (*out)[i] = static_cast<double>(v);
  }
}

Result<StoredTensor> ReadStoredTensor(const std::string& path, const nlohmann::json& header, std::string_view data,
                                      const std::string& name) {
  auto it = header.find(name);
  if (it == header.end() || !it->is_object()) {
    std::string names;
    for (auto& [key, value] : header.items()) {
      if (key != "__metadata__") names += (names.empty() ? "" : ", ") + key;
    }
    return InvalidArgumentError(path + ": no tensor '" + name + "' (it holds: " + (names.empty() ? "none" : names) +
                                "; name them with --x-name / --y-name)");
  }
  const nlohmann::json& t = *it;
  if (!t.contains("dtype") || !t["dtype"].is_string() || !t.contains("shape") || !t["shape"].is_array() ||
      !t.contains("data_offsets") || !t["data_offsets"].is_array() || t["data_offsets"].size() != 2) {
    return InvalidArgumentError(path + ": tensor '" + name + "' lacks dtype, shape or data_offsets");
  }
  StoredTensor out;
  uint64_t count = 1;
  for (const auto& dim : t["shape"]) {
    if (!dim.is_number_unsigned() || dim.get<uint64_t>() > (uint64_t{1} << 40)) {
      return InvalidArgumentError(path + ": tensor '" + name + "' has a malformed shape");
    }
    out.shape.push_back(dim.get<int64_t>());
    count *= dim.get<uint64_t>();
    if (count > (uint64_t{1} << 40)) return InvalidArgumentError(path + ": tensor '" + name + "' is implausibly large");
  }
  const std::string dtype = t["dtype"];
  size_t width = 0;
  if (dtype == "F64" || dtype == "I64") width = 8;
  if (dtype == "F32" || dtype == "I32") width = 4;
  if (dtype == "I16") width = 2;
  if (dtype == "U8" || dtype == "I8") width = 1;
  if (width == 0) {
    return InvalidArgumentError(path + ": tensor '" + name + "' has dtype " + dtype +
                                " (Plexus reads F32, F64, U8, I8, I16, I32, I64)");
  }
  const auto& offsets = t["data_offsets"];
  if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
    return InvalidArgumentError(path + ": tensor '" + name + "' has malformed data_offsets");
  }
  const auto begin = offsets[0].get<uint64_t>();
  const auto end = offsets[1].get<uint64_t>();
  if (begin > end || end > data.size() || end - begin != count * width) {
    return InvalidArgumentError(path + ": tensor '" + name + "' has data_offsets that do not match its shape (" +
                                std::to_string(count) + " " + dtype + " values) or the file's size");
  }
  const char* bytes = data.data() + begin;
  out.integral = dtype[0] != 'F';
  if (dtype == "F64") Convert<double>(bytes, count, &out.values);
  if (dtype == "F32") Convert<float>(bytes, count, &out.values);
  if (dtype == "I64") Convert<int64_t>(bytes, count, &out.values);
  if (dtype == "I32") Convert<int32_t>(bytes, count, &out.values);
  if (dtype == "I16") Convert<int16_t>(bytes, count, &out.values);
  if (dtype == "I8") Convert<int8_t>(bytes, count, &out.values);
  if (dtype == "U8") Convert<uint8_t>(bytes, count, &out.values);
  return out;
}

Result<Dataset> LoadSafetensors(const std::string& path, const DataFileOptions& o) {
  PLEXUS_ASSIGN_OR_RETURN(std::string bytes, ReadFileContents(path));
  if (bytes.size() < 8) return InvalidArgumentError(path + ": too short for safetensors");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(bytes[static_cast<size_t>(i)]);
  if (header_len > bytes.size() - 8 || header_len > (16u << 20)) {
    return InvalidArgumentError(path + ": the safetensors header length runs past the file");
  }
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, header_len), nullptr, /*allow_exceptions=*/false);
  if (!header.is_object()) return InvalidArgumentError(path + ": the safetensors header is not a JSON object");
  const std::string_view data = std::string_view(bytes).substr(8 + header_len);
  PLEXUS_ASSIGN_OR_RETURN(StoredTensor x, ReadStoredTensor(path, header, data, o.x_name));
  PLEXUS_ASSIGN_OR_RETURN(StoredTensor y, ReadStoredTensor(path, header, data, o.y_name));
  if (x.shape.empty()) return InvalidArgumentError(path + ": '" + o.x_name + "' needs an examples dimension");
  const int64_t n = x.shape[0];
  const bool labels_are_vector = y.shape.size() == 1 || (y.shape.size() == 2 && y.shape[1] == 1);
  if (o.regression ? (y.shape.empty() || y.shape.size() > 2 || y.shape[0] != n)
                   : (!labels_are_vector || y.shape[0] != n)) {
    return InvalidArgumentError(path + ": '" + o.y_name + "' must hold one label per example of '" + o.x_name + "' (" +
                                std::to_string(n) + ")");
  }
  Dataset d;
  d.example_shape.assign(x.shape.begin() + 1, x.shape.end());
  if (d.example_shape.empty()) d.example_shape = {1};
  d.features.resize(x.values.size());
  const int64_t per = d.features_per_example();
  for (size_t i = 0; i < x.values.size(); ++i) {
    const double v = x.values[i];
    if (!std::isfinite(v) || std::abs(v) > 3.4e38) {
      return InvalidArgumentError(path + ": '" + o.x_name + "' holds a non-finite value (example " +
                                  std::to_string(static_cast<int64_t>(i) / per) + ")");
    }
    d.features[i] = static_cast<float>(v);
  }
  d.labels.resize(static_cast<size_t>(n));
  if (o.regression) {
    d.target_width = y.shape.size() == 2 ? y.shape[1] : 1;
    d.targets.resize(y.values.size());
    for (size_t i = 0; i < y.values.size(); ++i) {
      if (!std::isfinite(y.values[i]) || std::abs(y.values[i]) > 3.4e38) {
        return InvalidArgumentError(path + ": '" + o.y_name + "' holds a non-finite target (example " +
                                    std::to_string(static_cast<int64_t>(i) / d.target_width) + ")");
      }
      d.targets[i] = static_cast<float>(y.values[i]);
    }
    return d;
  }
  for (int64_t i = 0; i < n; ++i) {
    PLEXUS_RETURN_IF_ERROR(
        CheckLabel(y.values[static_cast<size_t>(i)], path + ": '" + o.y_name + "'[" + std::to_string(i) + "]"));
    d.labels[static_cast<size_t>(i)] = static_cast<uint8_t>(y.values[static_cast<size_t>(i)]);
  }
  return d;
}

Status Append(Dataset* to, Dataset from, const std::string& path) {
  if (to->labels.empty()) {
    *to = std::move(from);
    return Status::Ok();
  }
  if (from.example_shape != to->example_shape || from.target_width != to->target_width) {
    return InvalidArgumentError(path + ": its examples' shape differs from the files before it in the folder");
  }
  if (from.feature_bytes.empty() != to->feature_bytes.empty() ||
      (!from.feature_bytes.empty() && from.byte_values != to->byte_values)) {
    return InvalidArgumentError(path + ": its examples are stored unlike the files before it in the folder");
  }
  to->features.insert(to->features.end(), from.features.begin(), from.features.end());
  to->feature_bytes.insert(to->feature_bytes.end(), from.feature_bytes.begin(), from.feature_bytes.end());
  to->targets.insert(to->targets.end(), from.targets.begin(), from.targets.end());
  to->labels.insert(to->labels.end(), from.labels.begin(), from.labels.end());
  return Status::Ok();
}

Result<Dataset> Select(Dataset all, const ExampleSelector& select) {
  if (!select) return all;
  PLEXUS_ASSIGN_OR_RETURN(std::vector<uint32_t> keep, select(all.labels));
  const auto per = static_cast<size_t>(all.features_per_example());
  Dataset out;
  out.example_shape = all.example_shape;
  out.num_classes = all.num_classes;
  out.target_width = all.target_width;
  const auto width = static_cast<size_t>(all.target_width);
  // Examples kept as bytes stay bytes (Fashion-MNIST's: a held-out share of a partition).
  const bool bytes = !all.feature_bytes.empty();
  out.byte_values = all.byte_values;
  if (bytes) {
    out.feature_bytes.resize(keep.size() * per);
  } else {
    out.features.resize(keep.size() * per);
  }
  out.labels.resize(keep.size());
  out.targets.resize(keep.size() * width);
  for (size_t k = 0; k < keep.size(); ++k) {
    if (keep[k] >= all.size()) {
      return InvalidArgumentError("example " + std::to_string(keep[k]) + " of " + std::to_string(all.size()));
    }
    if (bytes) {
      std::copy_n(all.feature_bytes.begin() + static_cast<std::ptrdiff_t>(keep[k] * per), per,
                  out.feature_bytes.begin() + static_cast<std::ptrdiff_t>(k * per));
    } else {
      std::copy_n(all.features.begin() + static_cast<std::ptrdiff_t>(keep[k] * per), per,
                  out.features.begin() + static_cast<std::ptrdiff_t>(k * per));
    }
    out.labels[k] = all.labels[keep[k]];
    std::copy_n(all.targets.begin() + static_cast<std::ptrdiff_t>(keep[k] * width), width,
                out.targets.begin() + static_cast<std::ptrdiff_t>(k * width));
  }
  return out;
}

std::string_view TrimSpaces(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Result<std::vector<int64_t>> ParseInputShape(const std::string& text) {
  std::vector<int64_t> shape;
  std::string_view rest = text;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view cell = TrimSpaces(rest.substr(0, comma));
    int64_t dim = 0;
    auto [end, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), dim);
    if (cell.empty() || ec != std::errc() || end != cell.data() + cell.size() || dim <= 0) {
      return InvalidArgumentError("input shape '" + text + "': expected positive integers separated by commas");
    }
    shape.push_back(dim);
    if (comma == std::string_view::npos) return shape;
    rest = rest.substr(comma + 1);
  }
}

Result<Dataset> LoadDataFile(const std::string& path, const DataFileOptions& options, const ExampleSelector& select) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return NotFoundError("data '" + path + "' does not exist");
  Dataset all;
  if (fs::is_directory(path, ec)) {
    std::vector<std::string> files;
    bool idx = false;
    for (const auto& entry : fs::directory_iterator(path, ec)) {
      const std::string name = entry.path().filename().string();
      if (EndsWith(name, ".safetensors")) files.push_back(entry.path().string());
      if (name.rfind("train-images-idx3-ubyte", 0) == 0 || name.rfind("t10k-images-idx3-ubyte", 0) == 0) idx = true;
    }
    if (files.empty() && idx) return LoadFashionMnist(path, options.split, select);
    if (files.empty() && IsTextCorpus(path)) return LoadTextCorpus(path, options.split, select);
    if (files.empty()) {
      return InvalidArgumentError("data folder '" + path +
                                  "' holds no .safetensors files, no IDX files and is not a text corpus");
    }
    std::sort(files.begin(), files.end());
    for (const std::string& file : files) {
      PLEXUS_ASSIGN_OR_RETURN(Dataset part, LoadSafetensors(file, options));
      PLEXUS_RETURN_IF_ERROR(Append(&all, std::move(part), file));
    }
  } else if (EndsWith(path, ".csv")) {
    PLEXUS_ASSIGN_OR_RETURN(all, LoadCsv(path, options));
  } else if (EndsWith(path, ".safetensors")) {
    PLEXUS_ASSIGN_OR_RETURN(all, LoadSafetensors(path, options));
  } else {
    return InvalidArgumentError("data '" + path +
                                "': expected a .csv file, a .safetensors file or a folder (of .safetensors files, or "
                                "Fashion-MNIST's IDX files)");
  }
  if (all.size() == 0) return InvalidArgumentError("data '" + path + "' holds no examples");
  all.num_classes = *std::max_element(all.labels.begin(), all.labels.end()) + 1;
  if (!options.input_shape.empty()) {
    int64_t want = 1;
    for (int64_t dim : options.input_shape) want *= dim;
    if (want != all.features_per_example()) {
      return InvalidArgumentError("data '" + path + "': the input shape holds " + std::to_string(want) +
                                  " values, an example has " + std::to_string(all.features_per_example()));
    }
    all.example_shape = options.input_shape;
  }
  return Select(std::move(all), select);
}

Result<HeldOut> HoldOut(const Dataset& d, double fraction, uint64_t seed) {
  if (!(fraction >= 0 && fraction < 1)) return InvalidArgumentError("the held-out fraction must lie in [0, 1)");
  std::vector<uint32_t> order(d.size());
  std::iota(order.begin(), order.end(), 0u);
  Rng rng = Rng::Derive(seed, 0xe5a1);
  rng.Shuffle(std::span<uint32_t>(order));
  size_t held = static_cast<size_t>(std::llround(fraction * static_cast<double>(d.size())));
  if (fraction > 0 && held == 0 && d.size() >= 2) held = 1;
  std::vector<uint32_t> out(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(held));
  std::vector<uint32_t> in(order.begin() + static_cast<std::ptrdiff_t>(held), order.end());
  std::sort(out.begin(), out.end());
  std::sort(in.begin(), in.end());
  HeldOut split;
  PLEXUS_ASSIGN_OR_RETURN(split.kept, Select(d, [&](const std::vector<uint8_t>&) { return in; }));
  PLEXUS_ASSIGN_OR_RETURN(split.held_out, Select(d, [&](const std::vector<uint8_t>&) { return out; }));
  return split;
}

}  // namespace plexus
