// libFuzzer target: TOML config and scenario files (`--config`, `--scenario`) as ExpandConfigFile
// turns them into flags for a subcommand. Malformed files end in a CommandError, never a crash.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "apps/plexus/commands.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/plexus_config_fuzz_" + std::to_string(::getpid()) + ".toml";
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  CLI::App app("fuzz");
  CLI::App* sim = app.add_subcommand("sim");
  int64_t rounds = 0;
  double attackers = 0;
  std::string strategy;
  bool dry_run = false;
  sim->add_option("--rounds", rounds);
  sim->add_option("--attackers", attackers);
  sim->add_option("--strategy", strategy);
  sim->add_flag("--dry-run", dry_run);
  plexus::cli::AddConfigOption(sim);
  try {
    std::vector<std::string> args = plexus::cli::ExpandConfigFile(app, {"plexus", "sim", "--config", path});
    std::vector<const char*> argv;
    for (const std::string& a : args) argv.push_back(a.c_str());
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const plexus::cli::CommandError&) {
  } catch (const CLI::Error&) {
  }
  std::remove(path.c_str());  // after each input: libFuzzer ends with _Exit, which runs no exit handlers
  return 0;
}
