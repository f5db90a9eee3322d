// How a process that calls a plexus server (plexus client, an edge aggregator's upstream)
// turns its TLS and token flags into ClientTls: the files read, the combinations checked, a
// bearer token refused in plaintext beyond this machine. Throws CommandError naming the flags.
#pragma once

#include <string>
#include <vector>

#include "client/grpc_transport.h"

namespace plexus::cli {

struct ClientTlsFiles {
  std::string ca, cert, key, token;  // file paths; empty: not given
};

// `flag_prefix` names the flags in messages ("--" for plexus client's --tls-ca, "--upstream-"
// for an edge's --upstream-tls-ca); `servers` are the addresses that may be called.
ClientTls ClientTlsFromFiles(const ClientTlsFiles& files, const std::vector<std::string>& servers,
                             const std::string& flag_prefix);

}  // namespace plexus::cli
