// plexus: the command-line entry point. Exceptions end here; everything below returns Status.
#include <grpc/support/log.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "apps/plexus/commands.h"
#include "core/memory_tuning.h"

namespace plexus::cli {

std::atomic<bool>& StopRequested() {
  static std::atomic<bool> stop{false};
  return stop;
}

namespace {
int stop_pipe[2] = {-1, -1};  // the handler writes a byte to [1]; StopSignalFd() is [0]
}  // namespace

int StopSignalFd() { return stop_pipe[0]; }

void InstallStopHandlers() {
  if (stop_pipe[0] < 0 && ::pipe2(stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0) stop_pipe[0] = stop_pipe[1] = -1;
  struct sigaction sa {};
  sa.sa_handler = [](int) {
    StopRequested().store(true);
    if (stop_pipe[1] >= 0) {
      const int saved = errno;  // write() is async-signal-safe; the interrupted code's errno is kept
      const char byte = 1;
      [[maybe_unused]] const ssize_t written = ::write(stop_pipe[1], &byte, 1);
      errno = saved;
    }
  };
  sigemptyset(&sa.sa_mask);
  // The first signal asks for a clean stop; a second one ends the process at once (a stop that
  // hangs must not need kill -9).
  sa.sa_flags = SA_RESETHAND;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

namespace {

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// For each unexpected flag, the closest flag the command knows (within 3 edits), as
// "--roundz: did you mean --rounds?" lines; empty when none is close.
std::string SuggestFlags(CLI::App& command, const std::vector<std::string>& unexpected) {
  std::string out;
  for (const std::string& arg : unexpected) {
    if (arg.rfind("--", 0) != 0) continue;
    const std::string given = arg.substr(0, arg.find('='));
    std::string best;
    size_t best_distance = 4;
    for (const CLI::Option* option : command.get_options()) {
      for (const std::string& name : option->get_lnames()) {
        const size_t d = EditDistance(given, "--" + name);
        if (d < best_distance) {
          best_distance = d;
          best = "--" + name;
        }
      }
    }
    if (!best.empty()) out += "plexus: " + given + " is not a flag of this command; did you mean " + best + "?\n";
  }
  return out;
}

}  // namespace

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
  AddPeerCommand(app);
#endif
  AddClientCommand(app);
  AddPrivacyCommand(app);
  // Logs go to stderr so that stdout carries only results (progress lines, JSON).
  spdlog::set_default_logger(spdlog::stderr_color_mt("plexus"));
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %v");
  // A write to a link the other end has closed must be an error on that link, not the end of
  // the process (libuv and raw sockets raise SIGPIPE otherwise). SIGINT and SIGTERM keep their
  // default (the end of the process) except in the commands that watch StopRequested.
  signal(SIGPIPE, SIG_IGN);
  // gRPC's own log lines (a failed bind, a refused connection) repeat what Plexus reports in one
  // line with what to do: they go to the debug level.
  gpr_set_log_function([](gpr_log_func_args* a) { spdlog::debug("grpc: {}", a->message); });
  try {
    std::vector<std::string> args = ExpandConfigFile(app, std::vector<std::string>(argv, argv + argc));
    std::vector<char*> expanded;
    for (std::string& a : args) expanded.push_back(a.data());
    app.parse(static_cast<int>(expanded.size()), expanded.data());
  } catch (const CLI::ExtrasError& e) {
    // The innermost command given (`plexus certs issue`): only its own flags are suggested.
    CLI::App* command = &app;
    while (!command->get_subcommands().empty()) command = command->get_subcommands().front();
    const int code = app.exit(e);
    std::fputs(SuggestFlags(*command, command->remaining()).c_str(), stderr);
    return code;
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
