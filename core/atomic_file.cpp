#include "core/atomic_file.h"

#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "core/large_blocks.h"

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

// Files at least kDirectWriteMinBytes large are written with O_DIRECT where the file system
// allows it: to the disk, past the page cache. A buffered write would copy every byte into
// page-cache pages that the process never reads back (checkpoints are read on restart only), and
// freshly allocated pages are dear: on the virtual machines the benchmarks run on, filling new
// page-cache pages cost more than sending the same bytes over TCP.
constexpr size_t kDirectBufferBytes = size_t{4} << 20;

std::atomic<uint64_t> direct_from_caller{0};
std::atomic<uint64_t> direct_copied{0};

// The write buffer comes from the large-block cache (page-aligned, as O_DIRECT needs): a fresh
// 4 MiB buffer per file cost a thousand page faults, each zeroing a page, for every checkpoint.
struct LargeBlockDeleter {
  void operator()(char* p) const { FreeLargeBlock(p, kDirectBufferBytes); }
};

bool Aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kDirectWriteAlignment == 0; }

// Writes `pieces` to `fd` (opened with O_DIRECT), the file then ending where they do if it was
// not longer. Whole aligned blocks of a piece that starts at an aligned file offset and memory
// address go from the piece's memory; everything else is copied into an aligned buffer. Sets
// *refused (and writes nothing) when the file system turns O_DIRECT down at the first write.
Status WriteDirect(int fd, std::initializer_list<std::string_view> pieces, const std::string& path, bool* refused) {
  *refused = false;
  std::unique_ptr<char, LargeBlockDeleter> buffer;
  try {
    buffer.reset(static_cast<char*>(AllocateLargeBlock(kDirectBufferBytes)));
  } catch (const std::bad_alloc&) {
    return UnavailableError("cannot allocate a write buffer for '" + path + "'");
  }
  // What is to be written next, in file order: blocks of the buffer and of the pieces.
  std::vector<iovec> queued;
  size_t filled = 0;       // bytes in the buffer
  size_t queued_upto = 0;  // of which already in `queued`
  bool first = true;
  uint64_t from_caller = 0, copied = 0;
  auto queue_buffer = [&] {
    if (filled > queued_upto) queued.push_back({buffer.get() + queued_upto, filled - queued_upto});
    copied += filled - queued_upto;
    queued_upto = filled;
  };
  auto flush = [&]() -> Status {
    size_t at = 0;
    while (at < queued.size()) {
      const int count = static_cast<int>(std::min<size_t>(queued.size() - at, IOV_MAX));
      const ssize_t w = ::writev(fd, queued.data() + at, count);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && errno == EINVAL && first) {
        *refused = true;
        return Status::Ok();
      }
      if (w <= 0) return UnavailableError("cannot write '" + path + "': " + std::strerror(w < 0 ? errno : EIO));
      first = false;
      for (auto done = static_cast<size_t>(w); done > 0;) {  // past what went out
        const size_t take = std::min(done, queued[at].iov_len);
        queued[at].iov_base = static_cast<char*>(queued[at].iov_base) + take;
        queued[at].iov_len -= take;
        done -= take;
        if (queued[at].iov_len == 0) ++at;
      }
    }
    queued.clear();
    filled = queued_upto = 0;
    return Status::Ok();
  };
  for (std::string_view piece : pieces) {
    while (!piece.empty()) {
      if (filled % kDirectWriteAlignment == 0 && Aligned(piece.data()) && piece.size() >= kDirectWriteAlignment) {
        queue_buffer();
        const size_t whole = piece.size() / kDirectWriteAlignment * kDirectWriteAlignment;
        queued.push_back({const_cast<char*>(piece.data()), whole});
        from_caller += whole;
        piece.remove_prefix(whole);
        continue;
      }
      const size_t take = std::min(piece.size(), kDirectBufferBytes - filled);
      std::memcpy(buffer.get() + filled, piece.data(), take);
      piece.remove_prefix(take);
      filled += take;
      if (filled == kDirectBufferBytes) {
        queue_buffer();
        PLEXUS_RETURN_IF_ERROR(flush());
        if (*refused) return Status::Ok();
      }
    }
  }
  // The last partial block is written through the page cache, so that the file ends where the
  // bytes do: a padded direct block would make the file longer and a cut shorter again, two
  // changes of its size, each a journal commit at the sync; a file written over in place at its
  // old size has none (WriteAndSync cuts only a file that was longer).
  const size_t tail = filled % kDirectWriteAlignment;
  filled -= tail;
  const char* tail_bytes = buffer.get() + filled;  // the flush below leaves them where they are
  queue_buffer();
  PLEXUS_RETURN_IF_ERROR(flush());
  if (*refused) return Status::Ok();
  if (tail > 0) {
    if (::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_DIRECT) != 0) {
      return UnavailableError("cannot write '" + path + "': " + std::strerror(errno));
    }
    PLEXUS_RETURN_IF_ERROR(WriteAll(fd, std::string_view(tail_bytes, tail), path));
    copied += tail;
  }
  direct_from_caller.fetch_add(from_caller, std::memory_order_relaxed);
  direct_copied.fetch_add(copied, std::memory_order_relaxed);
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

namespace {

// Whether the file lives in memory (tmpfs, ramfs). There a direct write still copies into the
// file's pages, after the copy into the aligned buffer that O_DIRECT needs: a second full copy
// of every update on the server's log path (a tenth of the ingest benchmark's time on tmpfs).
bool InMemory(const struct statfs& fs) { return fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC; }

bool InMemoryFileSystem(int fd) {
  struct statfs fs {};
  return ::fstatfs(fd, &fs) == 0 && InMemory(fs);
}

// Writes `pieces` to `path` and syncs it; removes it on failure. `in_place`: a file already there
// is overwritten from its start and cut to the new size afterwards, not truncated first, so that
// its blocks (or, on tmpfs, its pages) are reused.
Status WriteAndSync(const std::string& path, std::initializer_list<std::string_view> pieces, bool in_place) {
  size_t total = 0;
  for (std::string_view piece : pieces) total += piece.size();
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (in_place ? 0 : O_TRUNC);
  int fd = total >= kDirectWriteMinBytes ? ::open(path.c_str(), flags | O_DIRECT, 0644) : -1;
  // In memory there is no page cache to bypass: the same file, written buffered from the
  // caller's bytes (one copy).
  bool buffered = fd < 0 || (InMemoryFileSystem(fd) && ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_DIRECT) == 0);
  Status s;
  if (!buffered) {
    s = WriteDirect(fd, pieces, path, &buffered);
    if (buffered) {  // O_DIRECT refused: start over with an ordinary file
      ::close(fd);
      fd = -1;
    }
  }
  if (buffered) {
    if (fd < 0) fd = ::open(path.c_str(), flags, 0644);
    if (fd < 0) return InvalidArgumentError("cannot write '" + path + "': " + std::strerror(errno));
    for (std::string_view piece : pieces) {
      if (s.ok()) s = WriteAll(fd, piece, path);
    }
  }
  // A file written over in place keeps its old length when that was longer: cut it then, and only
  // then (a change of size is journaled at the sync).
  if (s.ok() && in_place) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      s = UnavailableError("cannot read the size of '" + path + "': " + std::strerror(errno));
    } else if (static_cast<size_t>(st.st_size) > total && ::ftruncate(fd, static_cast<off_t>(total)) != 0) {
      s = UnavailableError("cannot set the size of '" + path + "': " + std::strerror(errno));
    }
  }
  // The data and what reading it back needs (the size, the blocks' places), not the times: a
  // file written over in place at its old size syncs without a journal commit.
  if (s.ok() && ::fdatasync(fd) != 0) s = UnavailableError("cannot sync '" + path + "': " + std::strerror(errno));
  if (::close(fd) != 0 && s.ok()) s = UnavailableError("cannot close '" + path + "': " + std::strerror(errno));
  if (!s.ok()) ::unlink(path.c_str());
  return s;
}

// WriteAndSync to `path`.tmp, then renamed over `path`, then the directory synced.
Status WriteThenRename(const std::string& path, std::initializer_list<std::string_view> pieces, bool in_place) {
  const std::string tmp = path + ".tmp";
  PLEXUS_RETURN_IF_ERROR(WriteAndSync(tmp, pieces, in_place));
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return InternalError("cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(err));
  }
  return SyncDirectory(ParentDirectory(path));
}

}  // namespace

bool OnInMemoryFileSystem(const std::string& path) {
  struct statfs fs {};
  return ::statfs(path.c_str(), &fs) == 0 && InMemory(fs);
}

DirectWriteBytes DirectWriteBytesSoFar() {
  return {direct_from_caller.load(std::memory_order_relaxed), direct_copied.load(std::memory_order_relaxed)};
}

Status WriteFileInPlaceSynced(const std::string& path, std::initializer_list<std::string_view> pieces) {
  return WriteAndSync(path, pieces, /*in_place=*/true);
}

Status WriteFileAtomically(const std::string& path, std::initializer_list<std::string_view> pieces) {
  return WriteThenRename(path, pieces, /*in_place=*/false);
}

Status WriteFileAtomicallyOver(const std::string& path, std::initializer_list<std::string_view> pieces) {
  return WriteThenRename(path, pieces, /*in_place=*/true);
}

}  // namespace plexus
