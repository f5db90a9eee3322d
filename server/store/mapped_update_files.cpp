#include "server/store/mapped_update_files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/atomic_file.h"
#include "server/store/sqlite_store_files.h"

namespace plexus {

MappedUpdateFiles::MappedUpdateFiles(std::string dir, size_t max_spare_files, uint64_t max_spare_bytes)
    : dir_(std::move(dir)),
      max_spare_files_(max_spare_files),
      max_spare_bytes_(max_spare_bytes),
      name_rng_(std::random_device{}()) {}

MappedUpdateFiles::~MappedUpdateFiles() {
  // No block is lent any more (each holds the pool); a logged file's row still names it.
  std::lock_guard<std::mutex> lock(mu_);
  while (!files_.empty()) DropLocked(files_.begin()->second.get(), /*remove=*/!files_.begin()->second->logged);
}

std::unique_ptr<MappedUpdateFiles::File> MappedUpdateFiles::MakeFile(size_t bytes) {
  auto file = std::make_unique<File>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    file->name = sqlite_store::NewUpdateFileName(name_rng_());
  }
  file->values_bytes = bytes;
  const std::string path = dir_ + "/" + file->name;
  const size_t length = kValuesOffset + bytes;
  file->fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (file->fd < 0) return nullptr;
  void* mapped = MAP_FAILED;
  // Every page allocated now (posix_fallocate, not a sparse ftruncate): a full tmpfs refuses the
  // file here, where the heap can serve instead, rather than with SIGBUS when a page is touched.
  if (::posix_fallocate(file->fd, 0, static_cast<off_t>(length)) == 0) {
    mapped = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, file->fd, 0);
  }
  // The name is durable before any row can name it.
  if (mapped == MAP_FAILED || !SyncDirectory(dir_).ok()) {
    if (mapped != MAP_FAILED) ::munmap(mapped, length);
    ::close(file->fd);
    ::unlink(path.c_str());
    return nullptr;
  }
  file->base = static_cast<char*>(mapped);
  return file;
}

void* MappedUpdateFiles::Take(size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The spare that joined last: its pages are the likeliest still in the CPU's caches (as the
    // heap hands out its most recently freed block), so the decoder's writes need not fetch them.
    File* newest = nullptr;
    for (auto& [values, file] : files_) {
      if (file->lent || file->logged || file->values_bytes != bytes) continue;
      if (!newest || file->spare_since > newest->spare_since) newest = file.get();
    }
    if (newest) {
      newest->lent = true;
      --spare_files_;
      spare_bytes_ -= bytes;
      return newest->base + kValuesOffset;
    }
  }
  std::unique_ptr<File> file = MakeFile(bytes);  // outside the lock: a file system call
  if (!file) return nullptr;
  file->lent = true;
  char* values = file->base + kValuesOffset;
  std::lock_guard<std::mutex> lock(mu_);
  files_.emplace(values, std::move(file));
  return values;
}

void MappedUpdateFiles::GiveBack(void* p, size_t) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(p);
  if (it == files_.end()) return;
  it->second->lent = false;
  SettleLocked(it->second.get());
}

Result<std::optional<std::string>> MappedUpdateFiles::Log(const void* values, size_t bytes, std::string_view header) {
  File* file = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = files_.find(values);
    if (it == files_.end() || !it->second->lent || it->second->logged || it->second->values_bytes != bytes ||
        header.size() != kValuesOffset) {
      return std::optional<std::string>();
    }
    file = it->second.get();
    file->logged = true;  // taken for this row: a second Log of the same values writes a file of its own
  }
  // The caller holds the block, so the file stays; nobody else writes it while it is lent.
  const std::string path = dir_ + "/" + file->name;
  Status s;
  if (::pwrite(file->fd, header.data(), header.size(), 0) != static_cast<ssize_t>(header.size())) {
    s = UnavailableError("cannot write the header of '" + path + "': " + std::strerror(errno));
  } else if (::fdatasync(file->fd) != 0) {  // also the values written through the mapping
    s = UnavailableError("cannot sync '" + path + "': " + std::strerror(errno));
  }
  if (!s.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    file->logged = false;
    return s;
  }
  return std::optional<std::string>(file->name);
}

bool MappedUpdateFiles::Forget(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [values, file] : files_) {
    if (file->name != name) continue;
    if (file->logged) {
      file->logged = false;
      SettleLocked(file.get());
    }
    return true;
  }
  return false;
}

MappedUpdateFiles::Counts MappedUpdateFiles::counts() {
  std::lock_guard<std::mutex> lock(mu_);
  Counts c;
  for (const auto& [values, file] : files_) {
    c.lent += file->lent ? 1 : 0;
    c.logged += file->logged ? 1 : 0;
  }
  c.spare = spare_files_;
  return c;
}

void MappedUpdateFiles::SettleLocked(File* file) {
  if (file->lent || file->logged) return;
  if (spare_files_ < max_spare_files_ && spare_bytes_ + file->values_bytes <= max_spare_bytes_) {
    ++spare_files_;
    spare_bytes_ += file->values_bytes;
    file->spare_since = ++settled_;
    return;
  }
  DropLocked(file, /*remove=*/true);
}

void MappedUpdateFiles::DropLocked(File* file, bool remove) {
  ::munmap(file->base, kValuesOffset + file->values_bytes);
  ::close(file->fd);
  if (remove) ::unlink((dir_ + "/" + file->name).c_str());
  files_.erase(file->base + kValuesOffset);
}

}  // namespace plexus
