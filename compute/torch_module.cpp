// The binary's side of torch_module.h: finds and loads libplexus_torch.so once, and forwards
// trainer.h's and script_model.h's LibTorch functions to it.
#include "compute/torch_module.h"

#include <dlfcn.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <vector>

#include "compute/model_zoo.h"
#include "core/rng.h"

namespace plexus {
namespace {

constexpr const char* kModuleFile = "libplexus_torch.so";

// Where the module may be: PLEXUS_TORCH_MODULE (a file), beside an installed binary
// (BIN/../lib/plexus/), beside the binary, and where this build wrote it.
std::vector<std::string> Candidates() {
  std::vector<std::string> paths;
  if (const char* env = std::getenv("PLEXUS_TORCH_MODULE"); env != nullptr && *env != '\0') paths.push_back(env);
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    paths.push_back((exe.parent_path().parent_path() / "lib" / "plexus" / kModuleFile).string());
    paths.push_back((exe.parent_path() / kModuleFile).string());
  }
#ifdef PLEXUS_TORCH_MODULE_BUILD_PATH
  paths.push_back(PLEXUS_TORCH_MODULE_BUILD_PATH);
#endif
  return paths;
}

Result<const TorchModuleFunctions*> Load() {
  std::string tried;
  for (const std::string& path : Candidates()) {
    if (!std::filesystem::exists(path)) {
      tried += (tried.empty() ? "" : ", ") + path;
      continue;
    }
    // RTLD_NOW: a symbol the executable lacks is an error here, not a crash at its first call.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) return FailedPreconditionError(std::string("cannot load LibTorch's module: ") + dlerror());
    using Entry = const TorchModuleFunctions* (*)();
    auto entry = reinterpret_cast<Entry>(dlsym(handle, kTorchModuleEntry));
    if (entry == nullptr) return FailedPreconditionError(path + " is not Plexus's LibTorch module");
    const TorchModuleFunctions* functions = entry();
    if (functions->version != kTorchModuleVersion) {
      return FailedPreconditionError(path + " is LibTorch's module of another Plexus build");
    }
    return functions;  // never unloaded: its trainers live as long as the process
  }
  return FailedPreconditionError(
      "this needs LibTorch, whose module (libplexus_torch.so) is not installed beside plexus: looked at " + tried +
      " (a build without LibTorch trains with --trainer portable)");
}

}  // namespace

Result<const TorchModuleFunctions*> LoadTorchModule() {
  static std::once_flag once;
  static Result<const TorchModuleFunctions*> loaded = InternalError("not loaded");
  std::call_once(once, [] { loaded = Load(); });
  return loaded;
}

// What the module takes from the executable, named here so that every executable that links the
// forwarders below has them (a static library only brings the objects something refers to).
[[maybe_unused]] void ReferencesForTheTorchModule() {
  auto m = ModelState::Create({});
  if (m.ok()) {
    (void)m->CheckFinite();
    (void)m->CheckSameLayout(*m);
  }
  (void)InitModel("mlp", 0);
  Rng rng(0);
  (void)rng.Below(2);
  (void)Sha256Hex("");
  (void)Status::Ok().WithContext("");
}

Result<std::unique_ptr<Trainer>> MakeTorchTrainer(const std::string& model_name, int threads) {
  PLEXUS_ASSIGN_OR_RETURN(const TorchModuleFunctions* torch, LoadTorchModule());
  return torch->make_torch_trainer(model_name, threads);
}

Result<ScriptModelInfo> ReadScriptModel(const std::string& path) {
  PLEXUS_ASSIGN_OR_RETURN(const TorchModuleFunctions* torch, LoadTorchModule());
  return torch->read_script_model(path);
}

std::string DescribeLayoutDifference(const ModelState& here, const ModelState& there) {
  Result<const TorchModuleFunctions*> torch = LoadTorchModule();
  return torch.ok() ? (*torch)->describe_layout_difference(here, there) : torch.status().message();
}

Result<std::unique_ptr<Trainer>> MakeScriptTrainer(const std::string& path, const ScriptTrainerOptions& options) {
  PLEXUS_ASSIGN_OR_RETURN(const TorchModuleFunctions* torch, LoadTorchModule());
  return torch->make_script_trainer(path, options);
}

Status WriteScriptModel(const std::string& module_path, const ModelState& weights, const std::string& out,
                        const std::map<std::string, std::string>& metadata) {
  PLEXUS_ASSIGN_OR_RETURN(const TorchModuleFunctions* torch, LoadTorchModule());
  return torch->write_script_model(module_path, weights, out, metadata);
}

}  // namespace plexus
