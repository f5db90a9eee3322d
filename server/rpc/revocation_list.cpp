#include "server/rpc/revocation_list.h"

#include <spdlog/spdlog.h>

#include <fstream>
#include <sstream>

namespace plexus {

Result<std::shared_ptr<RevocationList>> RevocationList::Open(const std::string& path, int64_t recheck_ms) {
  std::shared_ptr<RevocationList> list(new RevocationList(path, recheck_ms));
  std::lock_guard<std::mutex> lock(list->mu_);
  list->checked_at_ = std::chrono::steady_clock::now();
  if (!std::filesystem::exists(path)) {
    const std::filesystem::path dir = std::filesystem::path(path).parent_path();
    if (!dir.empty() && !std::filesystem::is_directory(dir)) {
      return NotFoundError("revocation list '" + path + "': its directory " + dir.string() + " does not exist");
    }
    spdlog::info("revocation list {} does not exist yet: nobody is revoked until it is written", path);
    list->missing_ = true;
    return list;
  }
  PLEXUS_RETURN_IF_ERROR(list->Load());
  return list;
}

Status RevocationList::Load() {
  std::error_code ec;
  const auto mtime = std::filesystem::last_write_time(path_, ec);
  std::ifstream in(path_);
  if (ec || !in) return NotFoundError("cannot read revocation list '" + path_ + "'");
  std::set<std::string> names;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string name, extra;
    if (!(words >> name)) continue;
    if (words >> extra) {
      return InvalidArgumentError("revocation list '" + path_ + "' line " + std::to_string(number) +
                                  ": one client name per line");
    }
    names.insert(name);
  }
  names_ = std::move(names);
  mtime_ = mtime;
  return Status::Ok();
}

bool RevocationList::Revoked(const std::string& client) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (now - checked_at_ >= std::chrono::milliseconds(recheck_ms_)) {
    checked_at_ = now;
    std::error_code ec;
    const auto mtime = std::filesystem::last_write_time(path_, ec);
    if (ec) {
      if (!missing_ && !names_.empty()) spdlog::warn("revocation list {} is gone: kept as it was", path_);
      missing_ = true;
    } else if (missing_ || mtime != mtime_) {
      Status loaded = Load();
      if (loaded.ok()) {
        missing_ = false;
        spdlog::info("revocation list {} read: {} client(s) revoked", path_, names_.size());
      } else {
        spdlog::warn("revocation list kept as it was: {}", loaded.ToString());
      }
    }
  }
  return names_.count(client) > 0;
}

}  // namespace plexus
