// The lists of names a flag's --help offers, made from the registries (strategies, gossip
// algorithms, codecs, attacks), so that a new entry cannot be missing from the help. Plain
// functions; thread-safe.
#pragma once

#include <string>
#include <vector>

namespace plexus::cli {

// "one of: a, b, c;" — the form the help uses (a test reads the lists back from --help).
inline std::string OneOf(const std::vector<std::string>& names) {
  std::string out = "one of: ";
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + names[i];
  return out + ";";
}

}  // namespace plexus::cli
