// Mode: the federation mode as a type (instead of strings compared across the code), with the
// names users type and read. Thread-safe.
#pragma once

#include <string_view>

#include "core/status.h"

namespace plexus {

enum class Mode {
  kSync,       // rounds (SyncEngine)
  kAsync,      // FedBuff / FedAsync (AsyncEngine)
  kSemiAsync,  // FedCompass groups (AsyncEngine with semi_async)
};

// "sync", "async", "semiasync": the names of the --mode flag, the status and the result files.
std::string_view ModeName(Mode mode);
// InvalidArgument naming the three for any other name.
Result<Mode> ParseMode(std::string_view name);

}  // namespace plexus
