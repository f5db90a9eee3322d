// What `--model` and `--data` name for a command: a built-in model ("mlp", "cnn") or a user's
// TorchScript file (PATH.pt), and Fashion-MNIST (--data-dir) or a user's data file (--data, with
// --label-column, --input-shape, --x-name, --y-name). Throws CommandError (CLI edge only).
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "compute/data_files.h"
#include "compute/trainer.h"
#include "core/model_state.h"

namespace plexus::cli {

class ModelChoice {
 public:
  // Reads the file when `flag` names one (checking it is TorchScript); CommandError otherwise
  // when it is neither a file nor a built-in model's name, or when `loss` (cross_entropy, mse) is
  // mse for a built-in model.
  explicit ModelChoice(const std::string& flag, const std::string& loss = "cross_entropy");

  bool regression() const { return mse_; }
  // A language model: the built-in tinylm, or a TorchScript file trained with --loss next_byte.
  bool language() const;

  bool is_script() const { return !script_path_.empty(); }
  const std::string& script_path() const { return script_path_; }
  // What the federation is called in the server's database and the clients' join replies: the
  // built-in name, or "torchscript:" and the layout's hash (with "+mse" for regression).
  const std::string& federation_name() const { return federation_name_; }
  // The model to start from: the file's weights, or the built-in model initialized from `seed`.
  ModelState Initial(uint64_t seed) const;
  // The names of the model's tensors that are buffers (BatchNorm statistics), not trainable.
  const std::vector<std::string>& buffers() const { return script_buffers_; }
  // A LibTorch trainer (the portable one for built-in models when `portable`).
  Result<std::unique_ptr<Trainer>> MakeTrainer(int threads, bool portable, bool local_buffers = false) const;

 private:
  std::string flag_;
  std::string script_path_;
  std::string federation_name_;
  ModelState script_initial_;
  std::vector<std::string> script_buffers_;
  bool mse_ = false;
  bool next_byte_ = false;
};

// --loss: cross_entropy (classification, the default), mse (regression, TorchScript models) or
// next_byte (a TorchScript language model on a text corpus).
void AddLossFlag(CLI::App* cmd, std::string* loss);

// OK when a client started with `mine` (null: no --model) may train the model a server announced
// at join; otherwise FailedPrecondition saying why, in words a user acts on (start the client with
// the server's model file).
Status CheckServerModel(const ModelChoice* mine, const std::string& announced);

// --data and the flags that say how to read it.
struct DataFlags {
  std::string data;
  std::string label_column = "label";
  std::string input_shape;
  std::string x_name = "x";
  std::string y_name = "y";

  bool given() const { return !data.empty(); }
  DataFileOptions Options(Split split = Split::kTrain, bool regression = false) const;
};
void AddDataFlags(CLI::App* cmd, DataFlags* f, const std::string& what);

// A language model (--model tinylm, or --loss next_byte) without --data reads the text corpus of
// Debian's fortunes package (compute/text_corpus.h): sets f->data to it. Anything else is left as
// given.
void DefaultDataForModel(const std::string& model_flag, const std::string& loss, DataFlags* f);

// The data set for a command: the --data file (only the examples `select` keeps; real-valued
// targets for a regression), or Fashion-MNIST's `split` from `data_dir`.
Dataset LoadData(const DataFlags& f, bool regression, const std::string& data_dir, Split split,
                 const ExampleSelector& select = {});

// A simulation's training and test sets: a text corpus's training and validation windows; a
// user's data file with a seeded `test_split` share of it held out as the test set; or
// Fashion-MNIST's two splits from `data_dir`.
struct TrainAndTest {
  Dataset train, test;
};
TrainAndTest LoadTrainAndTest(const DataFlags& f, bool regression, const std::string& data_dir, double test_split,
                              uint64_t seed);

}  // namespace plexus::cli
