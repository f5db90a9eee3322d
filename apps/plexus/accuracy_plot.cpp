#include "apps/plexus/accuracy_plot.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "apps/plexus/commands.h"

namespace plexus::cli {
namespace {

// gnuplot takes file names inside double quotes: refuse the characters that would end them or that
// gnuplot expands (a backquote runs a command).
std::string Quoted(const std::string& s) {
  if (s.find_first_of("\"\\\n`") != std::string::npos) {
    throw CommandError("plot: file name '" + s + "' holds a quote, backslash, backquote or newline");
  }
  return "\"" + s + "\"";
}

// A file name for gnuplot: made absolute, because gnuplot reads a name starting with '<' as a
// command to run and an output starting with '|' as a pipe to one.
std::string QuotedPath(const std::string& path) {
  return Quoted(std::filesystem::absolute(path).lexically_normal().string());
}

// Runs gnuplot with `script` on its standard input: no shell, so nothing in a file name is ever
// interpreted as a command. Returns gnuplot's exit status, or -1 when it could not be run.
int RunGnuplot(const std::string& script) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_addclose(&actions, fds[1]);
  char arg0[] = "gnuplot";
  char* argv[] = {arg0, nullptr};
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, "gnuplot", &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[0]);
  if (spawned != 0) {
    close(fds[1]);
    return -1;
  }
  // gnuplot may exit early on an error: a write to the closed pipe must not kill this process.
  struct sigaction ignore {
  }, previous{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &previous);
  const char* p = script.data();
  size_t left = script.size();
  while (left > 0) {
    const ssize_t n = write(fds[1], p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    p += n;
    left -= static_cast<size_t>(n);
  }
  close(fds[1]);
  sigaction(SIGPIPE, &previous, nullptr);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The header names of a metrics CSV; CommandError when it cannot be read or lacks a column.
std::vector<std::string> Header(const std::string& csv) {
  std::ifstream in(csv);
  std::string line;
  if (!in || !std::getline(in, line)) throw CommandError("plot: cannot read '" + csv + "'");
  std::vector<std::string> names;
  std::stringstream fields(line);
  for (std::string f; std::getline(fields, f, ',');) names.push_back(f);
  for (const char* needed : {"round", "test_accuracy"}) {
    if (std::find(names.begin(), names.end(), needed) == names.end()) {
      throw CommandError("plot: '" + csv + "' has no column '" + needed + "' (expected a metrics CSV of plexus sim)");
    }
  }
  return names;
}

}  // namespace

void CheckPlotterPresent() {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    throw CommandError("plotting needs gnuplot: apt-get install gnuplot-nox (scripts/setup.sh installs it)");
  }
}

void PlotAccuracy(const std::vector<std::string>& metrics_csvs, const std::string& png) {
  if (metrics_csvs.empty()) throw CommandError("plot: no metrics files given");
  CheckPlotterPresent();
  bool all_virtual = true;
  for (const std::string& csv : metrics_csvs) {
    const std::vector<std::string> names = Header(csv);
    all_virtual = all_virtual && std::find(names.begin(), names.end(), "virtual_time_s") != names.end();
  }
  const std::string time_column = all_virtual ? "virtual_time_s" : "wall_time_s";
  std::ostringstream gp;
  gp << "set terminal pngcairo size 1400,500 font ',11' noenhanced\n"
     << "set output " << QuotedPath(png) << "\n"
     << "set datafile separator ','\n"
     << "set key bottom right\nset grid\nset yrange [0:1]\nset ylabel 'test accuracy'\n"
     << "set multiplot layout 1,2\n";
  for (const char* x : {"round", "time"}) {
    const bool by_round = std::string(x) == "round";
    gp << "set xlabel '" << (by_round ? "round" : all_virtual ? "virtual time (s)" : "wall time (s)") << "'\n";
    gp << "plot ";
    for (size_t i = 0; i < metrics_csvs.size(); ++i) {
      const std::string title = std::filesystem::path(metrics_csvs[i]).stem().string();
      gp << (i ? ", " : "") << QuotedPath(metrics_csvs[i]) << " using '" << (by_round ? "round" : time_column)
         << "':'test_accuracy' with linespoints pointsize 0.5 title " << Quoted(title);
    }
    gp << "\n";
  }
  gp << "unset multiplot\n";
  const int exit_status = RunGnuplot(gp.str());
  if (exit_status != 0) {
    throw CommandError("plot: gnuplot failed (exit status " + std::to_string(exit_status) + ") drawing '" + png + "'");
  }
}

}  // namespace plexus::cli
