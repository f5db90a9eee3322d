// Reads Fashion-MNIST (or MNIST) from the IDX files as Debian's dataset-fashion-mnist ships them,
// gzipped (`train-images-idx3-ubyte.gz` ...); uncompressed files with the same names minus ".gz"
// are read too. Pixels are scaled to [0, 1] and normalized with the training set's mean and
// standard deviation. Stateless functions; thread-safe.
#pragma once

#include <string>

#include "compute/dataset.h"
#include "core/status.h"

namespace plexus {

inline constexpr const char* kDefaultFashionMnistDir = "/usr/share/datasets/fashion-mnist";

enum class Split { kTrain, kTest };

// NotFound when the directory or a file is missing (the message names the Debian package);
// DataLoss when a file is truncated or its header is wrong.
Result<Dataset> LoadFashionMnist(const std::string& dir, Split split);

// Parses one IDX file's bytes (already decompressed). Exposed for tests.
Result<Dataset> ParseIdx(const std::string& images, const std::string& labels);

}  // namespace plexus
