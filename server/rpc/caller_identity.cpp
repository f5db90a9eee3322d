#include "server/rpc/caller_identity.h"

namespace plexus {

Result<std::string> CallerIdentity::Of(const grpc::ServerContext* ctx, const std::string& claimed,
                                       std::string* revoked) const {
  std::string who;
  if (mtls_) {
    auto names = ctx->auth_context()->FindPropertyValues("x509_common_name");
    if (names.empty()) return UnauthenticatedError("no client certificate common name");
    who.assign(names[0].data(), names[0].size());
  } else if (tokens_) {
    const auto& metadata = ctx->client_metadata();
    auto it = metadata.find("authorization");
    const std::string value = it == metadata.end() ? "" : std::string(it->second.data(), it->second.size());
    if (value.rfind("Bearer ", 0) != 0) {
      return UnauthenticatedError("this server needs a client token (plexus client --token-file)");
    }
    std::optional<std::string> client = tokens_->ClientFor(value.substr(7));
    if (!client) return UnauthenticatedError("unknown client token");
    who = *client;
  } else {
    who = claimed;  // nothing proves the name: revocation by name is all there is
  }
  if (!claimed.empty() && claimed != who) {
    return PermissionDeniedError(std::string(mtls_ ? "the client certificate is" : "the token is") + " for '" + who +
                                 "'; it cannot act as '" + claimed + "'");
  }
  if (revoked_ && !who.empty() && revoked_->Revoked(who)) {
    if (revoked) *revoked = who;
    return PermissionDeniedError("client '" + who + "' is revoked on this server");
  }
  return who;
}

}  // namespace plexus
