// Writing files so that a crash (process or machine) leaves either the old file or the whole new
// one, never a torn one: write a temporary next to it, sync it, rename it over, sync the
// directory. Used for models that outlive the process (checkpoints, exported models).
// Stateless functions; thread-safe for distinct paths.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "core/status.h"

namespace plexus {

// Files of at least kDirectWriteMinBytes are written with O_DIRECT where the file system allows
// it. A piece that starts at a file offset and a memory address that are both multiples of
// kDirectWriteAlignment goes to the disk from the caller's memory, in whole blocks; the rest (the
// other pieces, a piece's last partial block) is copied into an aligned buffer first, and the
// file's last partial block goes through the page cache. A caller that pads what it writes
// before a large piece to this alignment (a safetensors header: SafetensorsPrefixAlignedTo) saves
// a copy of that piece.
inline constexpr size_t kDirectWriteMinBytes = size_t{1} << 20;
inline constexpr size_t kDirectWriteAlignment = 4096;  // the largest logical block size in use

// Bytes this process's direct writes sent from the callers' memory, and bytes they copied
// into the aligned buffer first, over all threads since the start: for tests and benchmarks.
struct DirectWriteBytes {
  uint64_t from_caller = 0;
  uint64_t copied = 0;
};
DirectWriteBytes DirectWriteBytesSoFar();

// Writes the concatenation of `pieces` to `path` atomically and durably (through `path`.tmp,
// removed on failure). Files of a megabyte and more bypass the page cache (O_DIRECT) where the
// file system supports it. InvalidArgument when the file cannot be created, Unavailable on a failed
// write or sync, Internal when the rename fails.
Status WriteFileAtomically(const std::string& path, std::initializer_list<std::string_view> pieces);

// WriteFileAtomically, except that a file already at `path`.tmp (one the caller recycles) is
// written over in place and cut to size, not truncated first: its blocks are reused.
Status WriteFileAtomicallyOver(const std::string& path, std::initializer_list<std::string_view> pieces);

// Writes the concatenation of `pieces` to `path`, a name nobody else reads yet, and syncs the
// file but not its directory: for a caller that creates several files and syncs their directory
// once (SyncDirectory) before anything names them. A file already at `path` (one the caller
// recycles) is overwritten in place and then cut to size, so its blocks are reused: no block
// allocation for the file system to journal, no fresh page-cache pages. A failure removes the
// file; a crash may leave a partial one, which nothing names. Errors as WriteFileAtomically's.
Status WriteFileInPlaceSynced(const std::string& path, std::initializer_list<std::string_view> pieces);

// Whether `path` lies on a file system held in memory (tmpfs, ramfs), where a file's pages are
// all there is of it. False when it cannot be told.
bool OnInMemoryFileSystem(const std::string& path);

// Syncs a directory, so that files created in or renamed into it survive a power cut.
// Unavailable on failure.
Status SyncDirectory(const std::string& dir);

}  // namespace plexus
