// CallerIdentity: who a gRPC call comes from. With mutual TLS the identity is the client
// certificate's common name, with token authentication the client the bearer token names;
// without either the id the caller claims is taken as is (nothing proves it). A claimed id must
// match the proven one (an empty claim takes it), and a revoked identity is refused on every
// call. Borrows nothing; shares the token registry and revocation list. Thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "core/status.h"
#include "server/rpc/revocation_list.h"
#include "server/rpc/token_registry.h"

namespace plexus {

class CallerIdentity {
 public:
  CallerIdentity(bool mtls, std::shared_ptr<const TokenRegistry> tokens, std::shared_ptr<RevocationList> revoked)
      : mtls_(mtls), tokens_(std::move(tokens)), revoked_(std::move(revoked)) {}

  // Whether identities are proven (mutual TLS or tokens), not merely claimed.
  bool proven() const { return mtls_ || tokens_; }

  // The caller's identity: Unauthenticated without a valid certificate or token where one is
  // needed, PermissionDenied for a claim that is not the caller's or a revoked identity (then
  // `revoked`, when given, is set to it).
  Result<std::string> Of(const grpc::ServerContext* ctx, const std::string& claimed,
                         std::string* revoked = nullptr) const;

 private:
  const bool mtls_;
  const std::shared_ptr<const TokenRegistry> tokens_;
  const std::shared_ptr<RevocationList> revoked_;
};

}  // namespace plexus
