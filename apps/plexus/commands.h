// The plexus subcommands. Each Add*Command registers its flags and a callback on `app`; the
// callbacks throw CommandError (or CLI11's errors) on failure, which main() turns into a message
// and a non-zero exit. Exceptions stop here: below the CLI everything returns Status.
#pragma once

#include <CLI/CLI.hpp>

#include <atomic>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/status.h"

namespace plexus::cli {

struct CommandError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws CommandError with the status message when `s` is not OK.
void Check(const Status& s, const std::string& context = "");
template <typename T>
T Take(Result<T> r, const std::string& context = "") {
  Check(r.status(), context);
  return std::move(r).value();
}

// Set by SIGINT/SIGTERM once a command that watches it (server, client, peer) has called
// InstallStopHandlers; it then stops cleanly. Other commands (sim, ...) end on the signal, as
// any program does: before, every command caught it, and a simulation could not be interrupted.
std::atomic<bool>& StopRequested();
void InstallStopHandlers();
// Readable once a stop signal has arrived (a pipe the handler writes to), for a thread that
// waits for one in poll() instead of checking StopRequested on a timer; -1 before
// InstallStopHandlers, or when no pipe could be made.
int StopSignalFd();

// The contents of a file; throws CommandError naming `flag` when it cannot be read.
std::string ReadFileForFlag(const std::string& path, const std::string& flag);
// A client token file's contents without trailing whitespace; CommandError when empty.
std::string ReadTokenFile(const std::string& path);
// Whether HOST:PORT names a loopback address (127.0.0.0/8, ::1, localhost).
bool IsLoopback(const std::string& host_port);

// Adds `--config FILE` (TOML) to a subcommand: every flag may be given there, flags on the
// command line win.
void AddConfigOption(CLI::App* cmd);
// --scenario FILE: the same as --config, under the name simulation users look for.
void AddScenarioOption(CLI::App* cmd);

// Returns the command line (argv as strings) with the flags of the subcommand's --config file
// appended, except those the command line sets itself. Throws CommandError for a malformed file
// or a key that is not a flag of the subcommand.
std::vector<std::string> ExpandConfigFile(CLI::App& app, const std::vector<std::string>& args);
// For --dry-run: every flag of `cmd` with the value it resolved to and where that came from (the
// command line, the --config/--scenario file ExpandConfigFile read, or the default), one per line.
// `derived`: settings the command worked out after parsing, over the flag or its default (flag
// without dashes -> "VALUE  (where from)").
void PrintResolvedSettings(const CLI::App& cmd, const std::map<std::string, std::string>& derived = {});

void AddServerCommand(CLI::App& app);
void AddClientCommand(CLI::App& app);
void AddSimCommand(CLI::App& app);
void AddPlotCommand(CLI::App& app);
void AddStatusCommand(CLI::App& app);
void AddExportCommand(CLI::App& app);
void AddMergeCommand(CLI::App& app);
void AddCertsCommand(CLI::App& app);
void AddTokensCommand(CLI::App& app);
void AddPeerCommand(CLI::App& app);
void AddPrivacyCommand(CLI::App& app);

}  // namespace plexus::cli
