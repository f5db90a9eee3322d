// A user's own model: a TorchScript module saved from PyTorch (`torch.jit.script(model).save(F)`
// or `torch.jit.trace(...)`), taking a batch of inputs and returning a batch of logits. Plexus
// federates its floating-point parameters and buffers (BatchNorm's running statistics) as one
// ModelState, named as in the module's state_dict; integer buffers (BatchNorm's
// num_batches_tracked) stay as each process's copy of the module has them. Nothing of the file is
// run beyond the module's own forward. The functions below the two name checks are only in builds
// with LibTorch (PLEXUS_WITH_TORCH).
// Stateless functions; thread-safe.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compute/trainer.h"
#include "core/model_state.h"
#include "core/status.h"

namespace plexus {

// The name a federation of a TorchScript model goes by (server database, join reply):
// "torchscript:" and 16 hex digits of the SHA-256 of its tensor names and shapes, so a client
// whose model file has another layout is told so when it joins.
inline constexpr const char* kScriptModelPrefix = "torchscript:";
inline bool IsScriptModelName(const std::string& model_name) { return model_name.starts_with(kScriptModelPrefix); }
// That name for a model of `layout`'s tensor names and shapes, in its order (no LibTorch needed).
std::string ScriptModelNameOf(const ModelState& layout);
// True when `model` names a file rather than a built-in model (it ends in .pt or .pth).
inline bool IsScriptModelPath(const std::string& model) { return model.ends_with(".pt") || model.ends_with(".pth"); }

struct ScriptModelInfo {
  std::string path;
  std::string name;                  // "torchscript:..." (see above)
  ModelState initial;                // the file's weights: parameters, then floating-point buffers
  std::vector<std::string> buffers;  // the names among them that are buffers
};

// InvalidArgument naming the file when it is not a TorchScript archive, has no floating-point
// parameters, or holds tensors of a type Plexus cannot federate; NotFound when it is missing.
Result<ScriptModelInfo> ReadScriptModel(const std::string& path);

// Which of `a` and `b`'s tensors differ, in words, for the error a client with another model file
// gets ("fc.weight: [10, 64] here, [10, 32] at the server").
std::string DescribeLayoutDifference(const ModelState& here, const ModelState& there);

struct ScriptTrainerOptions {
  int threads = 1;
  // FedBN-style: the buffers (BatchNorm statistics) this trainer computes are kept here and used
  // for this client's training and evaluation, instead of the federation's; the update leaves
  // them unchanged (delta zero), so the server's stay as they were initialized.
  bool local_buffers = false;
  // Regression (--loss mse): the module returns predictions [batch, target_width] (or [batch] for
  // one target), trained on the mean squared error; Evaluation::accuracy then holds R^2. Otherwise
  // classification: cross-entropy on logits.
  bool mse = false;
  // A language model (--loss next_byte): the module takes [batch, t] int64 byte values and returns
  // [batch, t, vocabulary >= 256] logits of each next byte; the data are text windows
  // (compute/text_corpus.h), the losses per predicted byte.
  bool next_byte = false;
};

// A LibTorch trainer of the module in `path`. Train and Evaluate refuse (InvalidArgument) data
// whose examples the module cannot take, labels beyond its outputs, predictions of another width
// than the targets, or data of the other kind (class labels for mse, targets for cross-entropy). Thread-compatible,
// like every Trainer.
Result<std::unique_ptr<Trainer>> MakeScriptTrainer(const std::string& path, const ScriptTrainerOptions& options);

// Writes the module in `module_path` with `weights` (same layout) to `out` as TorchScript,
// loadable by torch.jit.load, with `metadata` as the extra file "plexus.json" (a JSON object).
Status WriteScriptModel(const std::string& module_path, const ModelState& weights, const std::string& out,
                        const std::map<std::string, std::string>& metadata);

}  // namespace plexus
