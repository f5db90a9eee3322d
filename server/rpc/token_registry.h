// TokenRegistry: token authentication for clients without certificates. The server keeps only
// SHA-256 hashes of the tokens, one client per line ("CLIENT_NAME SHA256_HEX", '#' comments); a
// call that presents a token whose hash is listed acts as that client. Immutable after parsing;
// thread-safe.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "core/status.h"

namespace plexus {

class TokenRegistry {
 public:
  // InvalidArgument naming the line for anything but "NAME HASH" with a 64-hex-digit hash, and
  // for a name or hash listed twice.
  static Result<TokenRegistry> Parse(const std::string& text);

  // The client a presented token belongs to, if any.
  std::optional<std::string> ClientFor(const std::string& token) const;
  size_t size() const { return client_of_hash_.size(); }

  // The line to store for `client` holding `token`.
  static std::string EntryFor(const std::string& client, const std::string& token);

 private:
  std::map<std::string, std::string> client_of_hash_;
};

}  // namespace plexus
