// GrpcFederationTransport: FederationTransport over the plexus.v1.Federation gRPC service, in
// the clear or with TLS / mutual TLS / bearer tokens. Downloads resume from the bytes already
// received; uploads larger than one chunk resume from the bytes the server kept of an interrupted
// attempt (checked by SHA-256). Thread-compatible.
#pragma once

#include <memory>
#include <string>

#include <grpcpp/security/credentials.h>

#include "client/federation_transport.h"

namespace plexus {

// How the client secures and authenticates its calls: PEM contents of the CA that signed the
// server's certificate (TLS), this client's certificate and key (mutual TLS), and/or a bearer
// token sent with every call (token authentication). All empty: an insecure channel.
struct ClientTls {
  std::string ca_pem;
  std::string cert_pem;
  std::string key_pem;
  std::string token{};
  bool enabled() const { return !ca_pem.empty(); }
};

// How fast the client may use its link. 0: as fast as it goes.
struct LinkLimits {
  // Uploads are paced to this average (in smaller chunks, so that the pace is even), for slow or
  // metered links that other traffic shares.
  int64_t max_upload_bytes_per_s = 0;
};

// `target` is HOST:PORT; with TLS, HOST must match the server certificate's name.
// `local_dp` is announced at join: "clip=C,noise=Z" when ClientRuntime runs local DP, else empty.
std::unique_ptr<FederationTransport> MakeGrpcFederationTransport(const std::string& target, const ClientTls& tls = {},
                                                                 const LinkLimits& limits = {},
                                                                 const std::string& local_dp = "");

// The channel credentials for `tls` (insecure when it is not enabled), for other gRPC clients
// such as `plexus status`.
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(const ClientTls& tls);

}  // namespace plexus
