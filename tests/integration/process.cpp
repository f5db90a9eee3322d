#include "tests/integration/process.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

namespace plexus::testing {

ChildProcess::ChildProcess(const std::string& binary, const std::vector<std::string>& args, const std::string& log_path)
    : log_path_(log_path) {
  pid_ = fork();
  if (pid_ == 0) {
    const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(binary.c_str()));
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !exited_) {
    kill(pid_, SIGKILL);
    waitpid(pid_, &status_, 0);
  }
}

void ChildProcess::Signal(int sig) const {
  if (pid_ > 0 && !exited_) kill(pid_, sig);
}

int ChildProcess::Wait(int timeout_ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!exited_) {
    const pid_t r = waitpid(pid_, &status_, WNOHANG);
    if (r == pid_) {
      exited_ = true;
      break;
    }
    if (std::chrono::steady_clock::now() >= until) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (WIFEXITED(status_)) return WEXITSTATUS(status_);
  if (WIFSIGNALED(status_)) return 128 + WTERMSIG(status_);
  return -1;
}

bool ChildProcess::running() {
  if (exited_) return false;
  return Wait(0) == -1;
}

std::string ChildProcess::Log() const {
  std::ifstream in(log_path_);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int RunToCompletion(const std::string& binary, const std::vector<std::string>& args, std::string* output,
                    int timeout_ms) {
  char path[] = "/tmp/plexus_run_XXXXXX";
  const int fd = mkstemp(path);
  close(fd);
  int code;
  {
    ChildProcess p(binary, args, path);
    code = p.Wait(timeout_ms);
    *output = p.Log();
  }
  unlink(path);
  return code;
}

int FreePort() {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  close(s);
  return port;
}

void PrintLogs(const std::string& dir, size_t tail_bytes) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() != ".log") continue;
    std::ifstream in(e.path());
    std::string text((std::istreambuf_iterator<char>(in)), {});
    std::cerr << "---- " << e.path() << " (last " << tail_bytes << " bytes)\n"
              << text.substr(text.size() > tail_bytes ? text.size() - tail_bytes : 0);
  }
}

}  // namespace plexus::testing
