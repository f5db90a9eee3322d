// Reads Fashion-MNIST (or MNIST) from the IDX files as Debian's dataset-fashion-mnist ships them,
// gzipped (`train-images-idx3-ubyte.gz` ...); uncompressed files with the same names minus ".gz"
// are read too. Pixels are scaled to [0, 1] and normalized with the training set's mean and
// standard deviation. Stateless functions; thread-safe.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "compute/dataset.h"
#include "core/status.h"

namespace plexus {

inline constexpr const char* kDefaultFashionMnistDir = "/usr/share/datasets/fashion-mnist";

enum class Split { kTrain, kTest };

// NotFound when the directory or a file is missing (the message names the Debian package);
// DataLoss when a file is truncated or its header is wrong.
Result<Dataset> LoadFashionMnist(const std::string& dir, Split split);

// Which examples to keep, chosen from all the labels of a split (e.g. one partition of it).
using ExampleSelector = std::function<Result<std::vector<uint32_t>>(const std::vector<uint8_t>& labels)>;

// Only the examples `select` names, in its order: the others are never converted, so a process
// that needs one partition does not hold the whole split (a peer among 64 on one machine).
// InvalidArgument when an index is out of range.
Result<Dataset> LoadFashionMnist(const std::string& dir, Split split, const ExampleSelector& select);

// Parses one IDX file's bytes (already decompressed). Exposed for tests.
Result<Dataset> ParseIdx(const std::string& images, const std::string& labels, const ExampleSelector& select = {});

}  // namespace plexus
