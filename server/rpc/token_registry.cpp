#include "server/rpc/token_registry.h"

#include <set>
#include <sstream>

#include "core/model_state.h"

namespace plexus {

Result<TokenRegistry> TokenRegistry::Parse(const std::string& text) {
  TokenRegistry r;
  std::set<std::string> names;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream fields(line);
    std::string name, digest, extra;
    if (!(fields >> name)) continue;  // blank or comment
    const std::string where = "token file line " + std::to_string(number);
    if (!(fields >> digest) || (fields >> extra) || digest.size() != 64 ||
        digest.find_first_not_of("0123456789abcdef") != std::string::npos) {
      return InvalidArgumentError(where + ": expected 'CLIENT_NAME SHA256_HEX' (lower-case, 64 digits)");
    }
    if (!names.insert(name).second) return InvalidArgumentError(where + ": client '" + name + "' is listed twice");
    if (!r.client_of_hash_.emplace(digest, name).second) {
      return InvalidArgumentError(where + ": the same token hash is listed twice");
    }
  }
  return r;
}

std::optional<std::string> TokenRegistry::ClientFor(const std::string& token) const {
  auto it = client_of_hash_.find(Sha256Hex(token));
  if (it == client_of_hash_.end()) return std::nullopt;
  return it->second;
}

std::string TokenRegistry::EntryFor(const std::string& client, const std::string& token) {
  return client + " " + Sha256Hex(token);
}

}  // namespace plexus
