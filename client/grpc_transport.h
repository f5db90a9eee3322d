// GrpcFederationTransport: FederationTransport over the plexus.v1.Federation gRPC service
// (insecure channel for now). Thread-compatible.
#pragma once

#include <memory>
#include <string>

#include "client/federation_transport.h"

namespace plexus {

// `target` is HOST:PORT.
std::unique_ptr<FederationTransport> MakeGrpcFederationTransport(const std::string& target);

}  // namespace plexus
