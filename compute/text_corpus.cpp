#include "compute/text_corpus.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/file_contents.h"

namespace plexus {
namespace {

namespace fs = std::filesystem;

constexpr size_t kValidationEvery = 10;  // window k is validation when k % 10 == 9
constexpr size_t kMaxFiles = 256;        // labels are bytes

// Regular files, not symlinks, not fortune's .dat indexes, in name order.
Result<std::vector<std::string>> Candidates(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return NotFoundError("text corpus '" + dir + "' is not a folder");
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_symlink(ec) || !entry.is_regular_file(ec) || name.ends_with(".dat") || name.starts_with(".")) {
      continue;
    }
    files.push_back(entry.path().string());
  }
  if (ec) return NotFoundError("text corpus '" + dir + "': " + ec.message());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

Result<std::vector<std::string>> TextCorpusFiles(const std::string& dir) {
  PLEXUS_ASSIGN_OR_RETURN(std::vector<std::string> files, Candidates(dir));
  if (files.empty()) {
    return InvalidArgumentError("text corpus '" + dir + "' holds no text files (Debian's package fortunes has one)");
  }
  if (files.size() > kMaxFiles) {
    return InvalidArgumentError("text corpus '" + dir + "' holds " + std::to_string(files.size()) +
                                " files; at most 256 (an example's label is its file)");
  }
  return files;
}

bool IsTextCorpus(const std::string& dir) {
  Result<std::vector<std::string>> files = Candidates(dir);
  if (!files.ok() || files->empty() || files->size() > kMaxFiles) return false;
  // Read in blocks, stopping at the first NUL: a folder of large binary files is not read whole.
  std::vector<char> block(1 << 16);
  for (const std::string& f : *files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) return false;
    while (in) {
      in.read(block.data(), static_cast<std::streamsize>(block.size()));
      if (std::memchr(block.data(), '\0', static_cast<size_t>(in.gcount())) != nullptr) return false;
    }
  }
  return true;
}

Result<Dataset> LoadTextCorpus(const std::string& dir, Split split, const ExampleSelector& select, int64_t context) {
  if (context < 1) return InvalidArgumentError("the text context must be at least one byte");
  PLEXUS_ASSIGN_OR_RETURN(std::vector<std::string> files, TextCorpusFiles(dir));
  const auto t = static_cast<size_t>(context);
  // Where each window of the split starts: (file, offset), and its label.
  std::vector<std::string> texts;
  std::vector<std::pair<uint32_t, size_t>> starts;
  Dataset d;
  d.example_shape = {context + 1};
  for (int v = 0; v < 256; ++v) d.byte_values[static_cast<size_t>(v)] = static_cast<float>(v);
  d.num_classes = static_cast<int64_t>(files.size());
  for (size_t f = 0; f < files.size(); ++f) {
    PLEXUS_ASSIGN_OR_RETURN(std::string text, ReadFileContents(files[f]));
    if (text.find('\0') != std::string::npos) {
      return InvalidArgumentError("text corpus file '" + files[f] + "' holds a NUL byte: not text");
    }
    for (size_t k = 0; text.size() >= t + 1 && k * t + t + 1 <= text.size(); ++k) {
      const bool validation = k % kValidationEvery == kValidationEvery - 1;
      if (validation != (split == Split::kTest)) continue;
      starts.emplace_back(static_cast<uint32_t>(f), k * t);
      d.labels.push_back(static_cast<uint8_t>(f));
    }
    texts.push_back(std::move(text));
  }
  std::vector<uint32_t> keep;
  if (select) {
    PLEXUS_ASSIGN_OR_RETURN(keep, select(d.labels));
  } else {
    keep.resize(starts.size());
    for (size_t k = 0; k < keep.size(); ++k) keep[k] = static_cast<uint32_t>(k);
  }
  std::vector<uint8_t> labels(keep.size());
  d.feature_bytes.resize(keep.size() * (t + 1));
  for (size_t k = 0; k < keep.size(); ++k) {
    if (keep[k] >= starts.size()) {
      return InvalidArgumentError("example " + std::to_string(keep[k]) + " of " + std::to_string(starts.size()));
    }
    const auto [file, offset] = starts[keep[k]];
    std::copy_n(texts[file].data() + offset, t + 1, d.feature_bytes.begin() + static_cast<std::ptrdiff_t>(k * (t + 1)));
    labels[k] = d.labels[keep[k]];
  }
  d.labels = std::move(labels);
  if (d.size() == 0) {
    return InvalidArgumentError("text corpus '" + dir + "' has no " +
                                (split == Split::kTest ? "validation" : "training") + " window of " +
                                std::to_string(context + 1) + " bytes");
  }
  return d;
}

double UnigramBitsPerChar(const Dataset& d) {
  const auto per = static_cast<size_t>(d.features_per_example());
  if (d.size() == 0 || per < 2 || d.feature_bytes.size() != d.size() * per) return 0.0;
  std::array<double, 256> counts{};
  double total = 0;
  for (size_t k = 0; k < d.size(); ++k) {
    const uint8_t* w = d.feature_bytes.data() + k * per;
    for (size_t i = 1; i < per; ++i) counts[w[i]] += 1;
    total += static_cast<double>(per - 1);
  }
  double bits = 0;
  for (double c : counts) {
    if (c > 0) bits -= c / total * std::log2(c / total);
  }
  return bits;
}

}  // namespace plexus
