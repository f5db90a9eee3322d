#include "compute/fashion_mnist.h"

#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <numeric>

namespace plexus {
namespace {

// Fashion-MNIST training-set statistics of pixel/255.
constexpr float kMean = 0.2860f;
constexpr float kStd = 0.3530f;

uint32_t BigEndian32(const std::string& b, size_t at) {
  return (uint32_t(uint8_t(b[at])) << 24) | (uint32_t(uint8_t(b[at + 1])) << 16) | (uint32_t(uint8_t(b[at + 2])) << 8) |
         uint32_t(uint8_t(b[at + 3]));
}

// Reads a whole file, inflating it when it is gzip (zlib reads plain files unchanged).
Result<std::string> ReadMaybeGzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return NotFoundError("cannot open '" + path + "'");
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  int err = 0;
  const char* msg = gzerror(f, &err);
  std::string why = msg ? msg : "";
  gzclose(f);
  if (n < 0 || (err != Z_OK && err != Z_STREAM_END)) return DataLossError("cannot decompress '" + path + "': " + why);
  return out;
}

Result<std::string> ReadIdxFile(const std::string& dir, const std::string& stem) {
  for (const std::string& name : {stem + ".gz", stem}) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    if (std::filesystem::exists(path)) {
      Result<std::string> bytes = ReadMaybeGzip(path);
      if (!bytes.ok()) return bytes.status();
      return bytes;
    }
  }
  return NotFoundError("'" + stem + "[.gz]' is not in '" + dir +
                       "' (install Debian's dataset-fashion-mnist, or pass the directory holding the IDX files)");
}

}  // namespace

DatasetView DatasetView::All(const Dataset& d) { return Prefix(d, 0); }

DatasetView DatasetView::Prefix(const Dataset& d, size_t n) {
  DatasetView v;
  v.data = &d;
  v.indices.resize(n == 0 ? d.size() : std::min(n, d.size()));
  std::iota(v.indices.begin(), v.indices.end(), 0u);
  return v;
}

Result<Dataset> ParseIdx(const std::string& images, const std::string& labels, const ExampleSelector& select) {
  if (images.size() < 16 || BigEndian32(images, 0) != 0x00000803) {
    return DataLossError("image file is not IDX3 (magic 0x00000803)");
  }
  if (labels.size() < 8 || BigEndian32(labels, 0) != 0x00000801) {
    return DataLossError("label file is not IDX1 (magic 0x00000801)");
  }
  const uint64_t count = BigEndian32(images, 4);
  const uint64_t rows = BigEndian32(images, 8);
  const uint64_t cols = BigEndian32(images, 12);
  if (rows == 0 || cols == 0 || rows > 4096 || cols > 4096) return DataLossError("implausible image size");
  if (BigEndian32(labels, 4) != count) {
    return DataLossError("image and label files disagree on the count (" + std::to_string(count) + " vs " +
                         std::to_string(BigEndian32(labels, 4)) + ")");
  }
  if (images.size() - 16 != count * rows * cols) return DataLossError("image file is truncated or has trailing bytes");
  if (labels.size() - 8 != count) return DataLossError("label file is truncated or has trailing bytes");
  Dataset d;
  d.example_shape = {static_cast<int64_t>(rows), static_cast<int64_t>(cols)};
  d.labels.resize(count);
  for (size_t i = 0; i < count; ++i) {
    d.labels[i] = static_cast<uint8_t>(labels[8 + i]);
    if (d.labels[i] > 9)
      return DataLossError("label " + std::to_string(d.labels[i]) + " at " + std::to_string(i) + " is not in [0, 10)");
  }
  std::vector<uint32_t> keep;
  if (select) {
    PLEXUS_ASSIGN_OR_RETURN(keep, select(d.labels));
  } else {
    keep.resize(count);
    std::iota(keep.begin(), keep.end(), 0u);
  }
  const size_t per_image = rows * cols;
  // Kept as the bytes they are; each byte value reads as the normalized pixel it always read as.
  for (int v = 0; v < 256; ++v)
    d.byte_values[v] = (static_cast<float>(static_cast<uint8_t>(v)) / 255.0f - kMean) / kStd;
  d.feature_bytes.resize(keep.size() * per_image);
  std::vector<uint8_t> kept_labels(keep.size());
  for (size_t k = 0; k < keep.size(); ++k) {
    if (keep[k] >= count) {
      return InvalidArgumentError("example " + std::to_string(keep[k]) + " of " + std::to_string(count));
    }
    std::memcpy(d.feature_bytes.data() + k * per_image, images.data() + 16 + keep[k] * per_image, per_image);
    kept_labels[k] = d.labels[keep[k]];
  }
  d.labels = std::move(kept_labels);
  return d;
}

Result<Dataset> LoadFashionMnist(const std::string& dir, Split split) { return LoadFashionMnist(dir, split, {}); }

Result<Dataset> LoadFashionMnist(const std::string& dir, Split split, const ExampleSelector& select) {
  if (!std::filesystem::is_directory(dir)) {
    return NotFoundError("data directory '" + dir +
                         "' does not exist (install Debian's dataset-fashion-mnist, or pass --data-dir)");
  }
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  PLEXUS_ASSIGN_OR_RETURN(std::string images, ReadIdxFile(dir, prefix + "-images-idx3-ubyte"));
  PLEXUS_ASSIGN_OR_RETURN(std::string labels, ReadIdxFile(dir, prefix + "-labels-idx1-ubyte"));
  Result<Dataset> d = ParseIdx(images, labels, select);
  if (!d.ok()) return d.status().WithContext("reading " + prefix + " set in '" + dir + "'");
  return d;
}

}  // namespace plexus
