#include "server/coordinator/mode.h"

#include <string>

namespace plexus {

std::string_view ModeName(Mode mode) {
  switch (mode) {
    case Mode::kSync:
      return "sync";
    case Mode::kAsync:
      return "async";
    case Mode::kSemiAsync:
      return "semiasync";
  }
  return "unknown";
}

Result<Mode> ParseMode(std::string_view name) {
  for (Mode m : {Mode::kSync, Mode::kAsync, Mode::kSemiAsync}) {
    if (name == ModeName(m)) return m;
  }
  return InvalidArgumentError("unknown mode '" + std::string(name) + "' (sync, async or semiasync)");
}

}  // namespace plexus
