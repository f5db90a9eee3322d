// A small certificate authority for mutual TLS, on OpenSSL: `plexus certs init` creates a CA
// (ca.crt, ca.key); `issue` signs a server certificate (NAME as its DNS name, or IP address) or a
// client certificate (NAME as its common name, which becomes the client's identity) or a peer
// certificate for `plexus peer` (both ends of a link: NAME, peer-<id>, as its common name). Keys are
// ECDSA P-256, written with mode 0600. Stateless functions; thread-safe.
#pragma once

#include <string>

#include "core/status.h"

namespace plexus::cli {

// Writes DIR/ca.crt and DIR/ca.key (creating DIR). AlreadyExists when ca.key is there.
Status CreateCertificateAuthority(const std::string& dir, int days);

enum class CertificateKind { kServer, kClient, kPeer };

// Writes DIR/NAME.crt and DIR/NAME.key signed by DIR/ca.{crt,key}. NotFound without a CA;
// InvalidArgument for a name that is not a plain host or client name.
Status IssueCertificate(const std::string& dir, const std::string& name, CertificateKind kind, int days);

}  // namespace plexus::cli
