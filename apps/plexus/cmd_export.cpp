#include <cstdio>
#include <filesystem>

#include "apps/plexus/commands.h"
#include "compute/model_zoo.h"
#if PLEXUS_WITH_TORCH
#include "compute/script_model.h"
#endif
#include "core/safetensors.h"
#include "gossip/node/peer_store.h"
#include "server/store/sqlite_store.h"

namespace plexus::cli {
namespace {

struct ExportFlags {
  std::string db;
  int64_t version = -1;
  std::string out;
  std::string format = "safetensors";
  std::string model;  // the TorchScript file, for --format torchscript
};

// What a user of a federation's model needs to know, beside its weights.
// `store`: the server's (null for a peer's database, which keeps no input shape).
std::map<std::string, std::string> UserModelMetadata(SqliteStore* store, const std::string& model_name) {
  std::map<std::string, std::string> meta{
      {"plexus.model", model_name},
      {"plexus.preprocess", "none: the model takes the features as the data files the clients trained on hold them"}};
  if (!store) return meta;
  if (Result<std::string> shape = store->GetMeta("input_shape"); shape.ok() && !shape->empty()) {
    meta["plexus.input_shape"] = *shape;
  }
  return meta;
}

// A peer's database (plexus peer --db) holds the peer's newest model only.
ModelState PeerModel(const ExportFlags& f) {
  if (f.version >= 0) {
    throw CommandError("--version: '" + f.db + "' is a peer's database, which keeps only the peer's newest model");
  }
  std::unique_ptr<gossip::PeerStore> peer = Take(gossip::PeerStore::Open(f.db), "--db " + f.db);
  std::optional<gossip::SavedPeer> saved = Take(peer->LoadAny(), "--db " + f.db);
  if (!saved) throw CommandError("peer database '" + f.db + "' holds no model yet");
  std::printf("peer %u's model after %llu rounds\n", static_cast<unsigned>(saved->node),
              static_cast<unsigned long long>(saved->rounds));
  saved->model.set_version(saved->rounds);
  return std::move(saved->model);
}

void RunExport(const ExportFlags& f) {
  if (!std::filesystem::exists(f.db)) throw CommandError("database '" + f.db + "' does not exist");
  if (f.format == "torchscript" && f.model.empty()) {
    throw CommandError("--format torchscript needs --model: the TorchScript file the federation was started with");
  }
  const bool peer = Take(gossip::PeerStore::IsPeerDatabase(f.db), "--db " + f.db);
  std::unique_ptr<SqliteStore> store = peer ? nullptr : Take(SqliteStore::Open(f.db));
  ModelState model;
  if (peer) {
    model = PeerModel(f);
  } else if (f.version < 0) {
    std::optional<ModelState> latest = Take(store->LatestCheckpoint());
    if (!latest) throw CommandError("database '" + f.db + "' holds no checkpoint");
    model = std::move(*latest);
  } else {
    model = Take(store->Checkpoint(static_cast<uint64_t>(f.version)));
  }
  const std::string built_in = BuiltInModelOf(model);
  Result<std::string> stored_name = store ? store->GetMeta("model") : Result<std::string>(built_in);
  const std::string model_name = stored_name.ok() && !stored_name->empty() ? *stored_name
                                 : built_in.empty()                        ? "torchscript"
                                                                           : built_in;
  std::map<std::string, std::string> metadata =
      built_in.empty() ? UserModelMetadata(store.get(), model_name) : BuiltInModelMetadata(built_in);
  if (f.format == "torchscript") {
#if PLEXUS_WITH_TORCH
    metadata["plexus.version"] = std::to_string(model.version());  // safetensors files carry it already
    Check(WriteScriptModel(f.model, model, f.out, metadata), "--model " + f.model);
#else
    throw CommandError("--format torchscript needs LibTorch, which this build leaves out");
#endif
  } else {
    Check(WriteSafetensorsFile(f.out, model, metadata));
  }
  if (!built_in.empty()) {
    std::printf("the %s takes images preprocessed as (x / 255 - 0.2860) / 0.3530 (in the file's metadata too)\n",
                built_in.c_str());
  }
  std::printf("wrote version %llu (%zu parameters, sha256 %s) to %s as %s\n",
              static_cast<unsigned long long>(model.version()), model.num_params(), model.ContentSha256().c_str(),
              f.out.c_str(), f.format.c_str());
}

}  // namespace

void AddExportCommand(CLI::App& app) {
  auto f = std::make_shared<ExportFlags>();
  CLI::App* cmd =
      app.add_subcommand("export", "Write a model from a server's or a peer's database as .safetensors or TorchScript");
  cmd->add_option("--db", f->db, "SQLite database of a plexus server, or of a plexus peer (its newest model)")
      ->required();
  cmd->add_option("--version", f->version, "Model version to export (default: the latest)");
  cmd->add_option("--out", f->out, "Output file (.safetensors, or .pt with --format torchscript)")->required();
  cmd->add_option("--format", f->format,
                  "safetensors (the weights, for safetensors.torch.load_file) or torchscript (the --model module with "
                  "the federation's weights, for torch.jit.load)")
      ->check(CLI::IsMember({"safetensors", "torchscript"}))
      ->capture_default_str();
  cmd->add_option("--model", f->model, "The TorchScript file the federation was started with (--format torchscript)");
  AddConfigOption(cmd);
  cmd->callback([f] { RunExport(*f); });
}

}  // namespace plexus::cli
