// A user's data set from files, for `--data PATH`:
//   *.csv           a header line, then one example per line: numeric feature columns and an
//                   integer label column (named by label_column)
//   *.safetensors   tensors `x` (examples first; F32, F64, U8, I8, I16, I32 or I64) and `y`
//                   (integer class labels, one per example); the names are options
//   a directory     every *.safetensors file in it, in name order, concatenated; or, when it holds
//                   Fashion-MNIST IDX files, that data set (its training or test split); or,
//                   when it holds only plain-text files, a text corpus for a language model
//                   (compute/text_corpus.h: the split picks its training or validation windows)
// Features are kept as float32 as they are stored (no normalization: the model gets what the file
// holds); labels are class indices in [0, 256), or real-valued targets for regression. Every error names the file, and
// the line and column for CSV. Stateless functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "compute/dataset.h"
#include "compute/fashion_mnist.h"
#include "core/status.h"

namespace plexus {

struct DataFileOptions {
  std::string label_column = "label";  // CSV
  std::string x_name = "x";            // safetensors
  std::string y_name = "y";
  // The shape of one example as the model takes it (e.g. {1, 28, 28}); empty: as stored (CSV:
  // {number of feature columns}; safetensors: x's shape without its first dimension).
  std::vector<int64_t> input_shape;
  Split split = Split::kTrain;  // which split of a Fashion-MNIST directory
  // Regression: the label column (CSV) or `y` (safetensors, [n] or [n, k]) holds real-valued
  // targets instead of class indices.
  bool regression = false;
};

// "1,28,28" -> {1, 28, 28}. InvalidArgument unless every dimension is a positive integer.
Result<std::vector<int64_t>> ParseInputShape(const std::string& text);

// Loads `path` as described above, keeping only the examples `select` names (all when unset).
// NotFound when it does not exist; InvalidArgument (naming the file, line and column) for a ragged
// CSV row, a non-numeric cell, a missing label column, a label that is not an integer in
// [0, 256), NaN or infinity among the features, a safetensors file without `x` or `y` or with
// counts that disagree, or an input shape that does not hold an example's features.
Result<Dataset> LoadDataFile(const std::string& path, const DataFileOptions& options,
                             const ExampleSelector& select = {});

// Splits `d` into two data sets: a seeded random `fraction` of the examples (at least one when the
// fraction is positive and there are two or more examples) and the rest. Used to hold out a local
// evaluation split, or the simulator's test set.
struct HeldOut {
  Dataset kept;
  Dataset held_out;
};
Result<HeldOut> HoldOut(const Dataset& d, double fraction, uint64_t seed);

}  // namespace plexus
