// plexus: the command-line entry point. Exceptions end here; everything below returns Status.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdio>

#include "apps/plexus/commands.h"
#include "core/memory_tuning.h"

namespace plexus::cli {

std::atomic<bool>& StopRequested() {
  static std::atomic<bool> stop{false};
  return stop;
}

void InstallStopHandlers() {
  struct sigaction sa {};
  sa.sa_handler = [](int) { StopRequested().store(true); };
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

}  // namespace plexus::cli

int main(int argc, char** argv) {
  using namespace plexus::cli;
  plexus::KeepLargeAllocations();
  CLI::App app("Plexus: federated and decentralized learning", "plexus");
  app.require_subcommand(1);
  app.set_version_flag("--version", "plexus 0.1.0");
#ifdef PLEXUS_WITH_SERVER
  AddServerCommand(app);
  AddSimCommand(app);
  AddPlotCommand(app);
  AddStatusCommand(app);
  AddExportCommand(app);
  AddMergeCommand(app);
  AddCertsCommand(app);
  AddTokensCommand(app);
#endif
  AddClientCommand(app);
  // Logs go to stderr so that stdout carries only results (progress lines, JSON).
  spdlog::set_default_logger(spdlog::stderr_color_mt("plexus"));
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %v");
  InstallStopHandlers();
  try {
    std::vector<std::string> args = ExpandConfigFile(app, std::vector<std::string>(argv, argv + argc));
    std::vector<char*> expanded;
    for (std::string& a : args) expanded.push_back(a.data());
    app.parse(static_cast<int>(expanded.size()), expanded.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const CommandError& e) {
    std::fprintf(stderr, "plexus: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "plexus: unexpected error: %s\n", e.what());
    return 1;
  }
  return 0;
}
