// ReadFileContents: a whole file's bytes, as the one reader of small and medium files in the tree
// (data files, configuration, tokens, certificates, coded updates kept by the store). Files that
// may be hostile or huge have their own readers with limits (the client's state directory).
// Stateless; thread-safe.
#pragma once

#include <string>

#include "core/status.h"

namespace plexus {

// NotFound (naming the path and why) when the file cannot be opened: missing, a directory, or
// not readable; Unavailable when reading fails part way.
Result<std::string> ReadFileContents(const std::string& path);

}  // namespace plexus
