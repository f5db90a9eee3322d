#include <cstdio>

#include "apps/plexus/certificate_authority.h"
#include "apps/plexus/commands.h"

namespace plexus::cli {

void AddCertsCommand(CLI::App& app) {
  auto dir = std::make_shared<std::string>("certs");
  auto days = std::make_shared<int>(825);
  auto server_name = std::make_shared<std::string>();
  auto client_name = std::make_shared<std::string>();
  auto peer_name = std::make_shared<std::string>();
  CLI::App* certs = app.add_subcommand("certs", "Create a certificate authority and issue certificates for mutual TLS");
  certs->require_subcommand(1);

  CLI::App* init = certs->add_subcommand("init", "Create DIR/ca.crt and DIR/ca.key");
  init->add_option("--dir", *dir, "Directory for the CA and certificates")->capture_default_str();
  init->add_option("--days", *days, "Validity in days")->check(CLI::Range(1, 36500))->capture_default_str();
  init->callback([=] {
    Check(CreateCertificateAuthority(*dir, *days));
    std::printf("created %s/ca.crt and %s/ca.key (keep ca.key offline)\n", dir->c_str(), dir->c_str());
  });

  CLI::App* issue = certs->add_subcommand("issue", "Issue DIR/NAME.crt and DIR/NAME.key signed by the CA");
  issue->add_option("--dir", *dir, "Directory holding the CA")->capture_default_str();
  issue->add_option("--days", *days, "Validity in days")->check(CLI::Range(1, 36500))->capture_default_str();
  auto* s = issue->add_option("--server", *server_name, "Server certificate for this DNS name or IP address");
  auto* c = issue->add_option("--client", *client_name, "Client certificate; NAME becomes the client's identity");
  auto* p = issue->add_option("--peer", *peer_name, "Peer certificate for plexus peer; NAME is peer-<partition-index>");
  s->excludes(c);
  p->excludes(s);
  p->excludes(c);
  issue->callback([=] {
    if (server_name->empty() + client_name->empty() + peer_name->empty() != 2)
      throw CommandError("give exactly one of --server NAME, --client NAME or --peer NAME");
    const CertificateKind kind = !server_name->empty()   ? CertificateKind::kServer
                                 : !client_name->empty() ? CertificateKind::kClient
                                                         : CertificateKind::kPeer;
    const std::string& name = !server_name->empty() ? *server_name : !client_name->empty() ? *client_name : *peer_name;
    Check(IssueCertificate(*dir, name, kind, *days));
    std::printf("issued %s/%s.crt and %s/%s.key (%s)\n", dir->c_str(), name.c_str(), dir->c_str(), name.c_str(),
                kind == CertificateKind::kServer   ? "server"
                : kind == CertificateKind::kClient ? "client"
                                                   : "peer");
  });
}

}  // namespace plexus::cli
