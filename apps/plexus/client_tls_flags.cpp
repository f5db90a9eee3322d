#include "apps/plexus/client_tls_flags.h"

#include "apps/plexus/commands.h"

namespace plexus::cli {

ClientTls ClientTlsFromFiles(const ClientTlsFiles& files, const std::vector<std::string>& servers,
                             const std::string& flag_prefix) {
  const std::string ca = flag_prefix + "tls-ca", cert = flag_prefix + "tls-cert", key = flag_prefix + "tls-key",
                    token = flag_prefix + "token-file";
  ClientTls tls;
  if (!files.token.empty()) tls.token = ReadTokenFile(files.token);
  if (!files.cert.empty() || !files.key.empty() || (!files.ca.empty() && tls.token.empty())) {
    const int tls_flags = !files.ca.empty() + !files.cert.empty() + !files.key.empty();
    if (tls_flags != 3) {
      throw CommandError("mutual TLS needs all of " + ca + ", " + cert + " and " + key + " (or " + ca + " with " +
                         token + ")");
    }
    tls.cert_pem = ReadFileForFlag(files.cert, cert);
    tls.key_pem = ReadFileForFlag(files.key, key);
  }
  if (!files.ca.empty()) tls.ca_pem = ReadFileForFlag(files.ca, ca);
  // A bearer token in plaintext is anyone's who can see the traffic: only to this machine.
  for (const std::string& server : servers) {
    if (!tls.token.empty() && !tls.enabled() && !IsLoopback(server)) {
      throw CommandError("refusing to send the client token in plaintext to " + server + ": add " + ca +
                         " with the server's CA (the server then needs --tls-cert and --tls-key)");
    }
  }
  return tls;
}

}  // namespace plexus::cli
