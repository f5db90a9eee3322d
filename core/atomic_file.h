// Writing files so that a crash (process or machine) leaves either the old file or the whole new
// one, never a torn one: write a temporary next to it, sync it, rename it over, sync the
// directory. Used for models that outlive the process (checkpoints, exported models).
// Stateless functions; thread-safe for distinct paths.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

#include "core/status.h"

namespace plexus {

// Writes the concatenation of `pieces` to `path` atomically and durably (through `path`.tmp,
// removed on failure). Files of a megabyte and more bypass the page cache (O_DIRECT) where the
// file system supports it. InvalidArgument when the file cannot be created, Unavailable on a failed
// write or sync, Internal when the rename fails.
Status WriteFileAtomically(const std::string& path, std::initializer_list<std::string_view> pieces);

// Syncs a directory, so that files created in or renamed into it survive a power cut.
// Unavailable on failure.
Status SyncDirectory(const std::string& dir);

}  // namespace plexus
