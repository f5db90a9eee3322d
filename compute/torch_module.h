// The seam between the `plexus` binary and LibTorch: everything that needs LibTorch
// (torch_trainer.cpp, script_trainer.cpp) is built into a module of its own, libplexus_torch.so,
// which the binary loads the first time a command trains, evaluates or reads a TorchScript file.
// Commands that never do (help, status, certs, tokens, privacy, merge, export of safetensors, a
// server that does not evaluate) start without loading LibTorch's hundreds of libraries and
// static initializers (about 0.6 s on this machine).
//
// The module resolves what it uses of Plexus (ModelState, Status, the large-block allocator, ...)
// from the executable that loads it, which exports its symbols (CMAKE_ENABLE_EXPORTS): one copy
// of each, one allocator on both sides. It hands the binary one table of functions.
// Internal to compute/: callers use trainer.h and script_model.h, whose LibTorch functions the
// binary forwards through this table (torch_module.cpp).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "compute/script_model.h"
#include "compute/trainer.h"

namespace plexus {

// Bumped when the table changes: a module from another build is refused.
inline constexpr int kTorchModuleVersion = 1;

struct TorchModuleFunctions {
  int version = kTorchModuleVersion;
  Result<std::unique_ptr<Trainer>> (*make_torch_trainer)(const std::string& model_name, int threads);
  Result<ScriptModelInfo> (*read_script_model)(const std::string& path);
  std::string (*describe_layout_difference)(const ModelState& here, const ModelState& there);
  Result<std::unique_ptr<Trainer>> (*make_script_trainer)(const std::string& path, const ScriptTrainerOptions& options);
  Status (*write_script_model)(const std::string& module_path, const ModelState& weights, const std::string& out,
                               const std::map<std::string, std::string>& metadata);
};

// The module's one exported symbol.
inline constexpr const char* kTorchModuleEntry = "plexus_torch_module";

// The table, loading the module on first use (thread-safe). FailedPrecondition naming the paths
// tried when it is not there (a build without LibTorch, or an install that left it out).
Result<const TorchModuleFunctions*> LoadTorchModule();

}  // namespace plexus
