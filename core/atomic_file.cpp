#include "core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace plexus {
namespace {

Status WriteAll(int fd, std::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return UnavailableError("cannot write '" + path + "': " + std::strerror(errno));
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

std::string ParentDirectory(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

Status SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return UnavailableError("cannot open directory '" + dir + "': " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return UnavailableError("cannot sync directory '" + dir + "': " + std::strerror(err));
  return Status::Ok();
}

Status WriteFileAtomically(const std::string& path, std::initializer_list<std::string_view> pieces) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return InvalidArgumentError("cannot write '" + tmp + "': " + std::strerror(errno));
  Status s;
  for (std::string_view piece : pieces) {
    if (s.ok()) s = WriteAll(fd, piece, tmp);
  }
  if (s.ok() && ::fsync(fd) != 0) s = UnavailableError("cannot sync '" + tmp + "': " + std::strerror(errno));
  if (::close(fd) != 0 && s.ok()) s = UnavailableError("cannot close '" + tmp + "': " + std::strerror(errno));
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return InternalError("cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(err));
  }
  return SyncDirectory(ParentDirectory(path));
}

}  // namespace plexus
