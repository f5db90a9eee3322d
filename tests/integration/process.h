// ChildProcess: runs a program (the plexus binary) as a real process for integration tests,
// with its stdout and stderr in a log file. The destructor kills it with SIGKILL if still running.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace plexus::testing {

class ChildProcess {
 public:
  ChildProcess(const std::string& binary, const std::vector<std::string>& args, const std::string& log_path);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  void Signal(int sig) const;
  // Waits up to timeout_ms; returns the exit code, 128+signal if killed, or -1 on timeout.
  int Wait(int timeout_ms);
  bool running();
  std::string Log() const;

 private:
  pid_t pid_ = -1;
  int status_ = 0;
  bool exited_ = false;
  std::string log_path_;
};

// Runs a program to completion; returns its exit code and fills *output with stdout+stderr.
int RunToCompletion(const std::string& binary, const std::vector<std::string>& args, std::string* output,
                    int timeout_ms = 120000);

// A TCP port on 127.0.0.1 that was free a moment ago.
int FreePort();

// Prints the last `tail_bytes` of every *.log file in `dir` to stderr (a failed test's processes).
void PrintLogs(const std::string& dir, size_t tail_bytes);

}  // namespace plexus::testing
