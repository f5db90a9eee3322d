#include <cstdio>
#include <filesystem>

#include "apps/plexus/commands.h"
#include "compute/model_zoo.h"
#include "core/safetensors.h"
#include "server/store/sqlite_store.h"

namespace plexus::cli {
namespace {

void RunExport(const std::string& db, int64_t version, const std::string& out) {
  if (!std::filesystem::exists(db)) throw CommandError("database '" + db + "' does not exist");
  std::unique_ptr<SqliteStore> store = Take(SqliteStore::Open(db));
  ModelState model;
  if (version < 0) {
    std::optional<ModelState> latest = Take(store->LatestCheckpoint());
    if (!latest) throw CommandError("database '" + db + "' holds no checkpoint");
    model = std::move(*latest);
  } else {
    model = Take(store->Checkpoint(static_cast<uint64_t>(version)));
  }
  const std::string built_in = BuiltInModelOf(model);
  Check(WriteSafetensorsFile(out, model,
                             built_in.empty() ? std::map<std::string, std::string>{} : BuiltInModelMetadata(built_in)));
  if (!built_in.empty()) {
    std::printf("the %s takes images preprocessed as (x / 255 - 0.2860) / 0.3530 (in the file's metadata too)\n",
                built_in.c_str());
  }
  std::printf("wrote version %llu (%zu parameters, sha256 %s) to %s\n",
              static_cast<unsigned long long>(model.version()), model.num_params(), model.ContentSha256().c_str(),
              out.c_str());
}

}  // namespace

void AddExportCommand(CLI::App& app) {
  auto db = std::make_shared<std::string>();
  auto version = std::make_shared<int64_t>(-1);
  auto out = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("export", "Write a checkpoint from a server database as .safetensors");
  cmd->add_option("--db", *db, "SQLite database of a plexus server")->required();
  cmd->add_option("--version", *version, "Model version to export (default: the latest)");
  cmd->add_option("--out", *out, "Output .safetensors file")->required();
  AddConfigOption(cmd);
  cmd->callback([=] { RunExport(*db, *version, *out); });
}

}  // namespace plexus::cli
