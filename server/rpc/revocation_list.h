// RevocationList: client identities the server refuses although their certificate or token is
// valid (a leaked key or token, a retired device). Read from a file of names, one per line ('#'
// starts a comment); the file is read again when its modification time changes (looked at most
// once per `recheck_ms`), so a revocation takes effect while the server runs. A file that does not
// exist yet revokes nobody until it is created (operators start with an empty list); one that
// disappears leaves the list as it was. Thread-safe.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "core/status.h"

namespace plexus {

class RevocationList {
 public:
  // NotFound when the file's directory does not exist (a mistyped path, not a list yet to be
  // written); InvalidArgument for a line with more than one word.
  static Result<std::shared_ptr<RevocationList>> Open(const std::string& path, int64_t recheck_ms = 1000);

  bool Revoked(const std::string& client);

 private:
  explicit RevocationList(std::string path, int64_t recheck_ms) : path_(std::move(path)), recheck_ms_(recheck_ms) {}
  // Reads the file; on failure the list stays as it was (a half-written file revokes nothing new
  // and restores nobody) and the error is returned.
  Status Load();

  const std::string path_;
  const int64_t recheck_ms_;
  std::mutex mu_;
  std::set<std::string> names_;                       // guarded by mu_
  std::filesystem::file_time_type mtime_;             // guarded by mu_
  std::chrono::steady_clock::time_point checked_at_;  // guarded by mu_
  bool missing_ = false;                              // guarded by mu_; the file was not there last look
};

}  // namespace plexus
