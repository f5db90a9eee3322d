#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include <cstdio>

#include <array>
#include <map>

#include "apps/plexus/commands.h"
#include "client/grpc_transport.h"
#include "gossip/node/peer_status.h"
#include "plexus/v1/federation.grpc.pb.h"

namespace plexus::cli {
namespace {

void RunStatus(const std::string& server, bool json, double timeout_s, const ClientTls& tls) {
  if (!tls.token.empty() && !tls.enabled() && !IsLoopback(server)) {
    throw CommandError("refusing to send the client token in plaintext to " + server + ": add --tls-ca");
  }
  auto stub = v1::Federation::NewStub(grpc::CreateChannel(server, ChannelCredentialsFor(tls)));
  grpc::ClientContext ctx;
  if (!tls.token.empty()) ctx.AddMetadata("authorization", "Bearer " + tls.token);
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  v1::StatusReply r;
  grpc::Status s = stub->GetStatus(&ctx, v1::StatusRequest(), &r);
  if (!s.ok()) throw CommandError("cannot get status from " + server + ": " + s.error_message());
  if (json) {
    nlohmann::json j = {{"mode", r.mode()},
                        {"round", r.round()},
                        {"rounds_total", r.rounds_total()},
                        {"model_version", r.model_version()},
                        {"model", r.model_name()},
                        {"strategy", r.strategy()},
                        {"known_clients", r.known_clients()},
                        {"connected_clients", r.connected_clients()},
                        {"round_selected", r.round_selected()},
                        {"round_received", r.round_received()},
                        {"updates_accepted", r.updates_accepted()},
                        {"updates_refused", r.updates_refused()},
                        {"updates_stale", r.updates_stale()},
                        {"uploads_resumed", r.uploads_resumed()},
                        {"upload_bytes_resumed", r.upload_bytes_resumed()},
                        {"upload_bytes_received", r.upload_bytes_received()},
                        {"finished", r.finished()}};
    j["last_accuracy"] = r.has_accuracy() ? nlohmann::json(r.last_accuracy()) : nlohmann::json();
    j["federated_accuracy"] =
        r.has_federated_accuracy() ? nlohmann::json(r.last_federated_accuracy()) : nlohmann::json();
    if (r.has_federated_accuracy()) j["federated_version"] = r.federated_version();
    j["refusals"] = nlohmann::json::object();
    for (const auto& [code, count] : r.refusals()) j["refusals"][code] = count;
    j["schedule"] = nlohmann::json::array();
    for (const v1::ClientSchedule& c : r.schedule()) {
      j["schedule"].push_back({{"client_id", c.client_id()},
                               {"ms_per_step", c.has_speed() ? nlohmann::json(c.ms_per_step()) : nlohmann::json()},
                               {"local_steps", c.local_steps()},
                               {"group", c.group()}});
    }
    j["last_merged"] = nlohmann::json::array();
    for (const v1::MergedUpdate& m : r.last_merged()) {
      j["last_merged"].push_back({{"client_id", m.client_id()},
                                  {"task_id", m.task_id()},
                                  {"staleness", m.staleness()},
                                  {"group", m.group()},
                                  {"ms_per_step", m.has_speed() ? nlohmann::json(m.ms_per_step()) : nlohmann::json()}});
    }
    if (r.dp_delta() > 0) {  // a server with central DP
      j["dp_epsilon"] = r.has_dp_epsilon() ? nlohmann::json(r.dp_epsilon()) : nlohmann::json();
      j["dp_delta"] = r.dp_delta();
    }
    if (!r.secure_stage().empty() || r.secure_rounds_aborted() > 0) {
      j["secure_stage"] = r.secure_stage();
      j["secure_rounds_aborted"] = r.secure_rounds_aborted();
      j["last_secure_abort"] = r.last_secure_abort();
    }
    if (!r.error().empty()) j["error"] = r.error();
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("mode              %s (%s, %s)\n", r.mode().c_str(), r.model_name().c_str(), r.strategy().c_str());
  std::printf("round             %llu of %lld%s\n", static_cast<unsigned long long>(r.round()),
              static_cast<long long>(r.rounds_total()), r.finished() ? " (finished)" : "");
  std::printf("model version     %llu\n", static_cast<unsigned long long>(r.model_version()));
  if (r.dp_delta() > 0) {
    if (r.has_dp_epsilon()) {
      std::printf("privacy           epsilon %.4g at delta %g (central DP)\n", r.dp_epsilon(), r.dp_delta());
    } else {
      std::printf("privacy           none: central DP without noise\n");
    }
  }
  if (!r.secure_stage().empty() || r.secure_rounds_aborted() > 0) {
    std::printf("secure agg.       %s; %lld groups aborted%s%s\n",
                r.secure_stage().empty() ? "between rounds" : ("round at stage '" + r.secure_stage() + "'").c_str(),
                static_cast<long long>(r.secure_rounds_aborted()), r.last_secure_abort().empty() ? "" : " (last: ",
                r.last_secure_abort().empty() ? "" : (r.last_secure_abort() + ")").c_str());
  }
  std::printf("clients           %lld connected, %lld known\n", static_cast<long long>(r.connected_clients()),
              static_cast<long long>(r.known_clients()));
  std::printf("in progress       %lld updates in, %lld tasks out\n", static_cast<long long>(r.round_received()),
              static_cast<long long>(r.round_selected()));
  std::printf(
      "updates           %lld accepted, %lld refused (%lld as stale); %lld uploads resumed (%lld bytes "
      "not sent again)\n",
      static_cast<long long>(r.updates_accepted()), static_cast<long long>(r.updates_refused()),
      static_cast<long long>(r.updates_stale()), static_cast<long long>(r.uploads_resumed()),
      static_cast<long long>(r.upload_bytes_resumed()));
  if (r.has_accuracy()) std::printf("last accuracy     %.4f\n", r.last_accuracy());
  if (r.has_federated_accuracy()) {
    std::printf("federated acc.    %.4f (version %llu, clients' held-out data)\n", r.last_federated_accuracy(),
                static_cast<unsigned long long>(r.federated_version()));
  }
  if (!r.refusals().empty()) {
    std::map<std::string, int64_t> sorted(r.refusals().begin(), r.refusals().end());
    std::printf("refused calls    ");
    for (const auto& [code, count] : sorted) std::printf(" %s %lld", code.c_str(), static_cast<long long>(count));
    std::printf("\n");
  }
  if (r.last_merged_size() > 0) {
    std::printf("last version      merged");
    for (const v1::MergedUpdate& m : r.last_merged()) {
      std::printf(" %s (staleness %llu)", m.client_id().c_str(), static_cast<unsigned long long>(m.staleness()));
    }
    std::printf("\n");
  }
  if (r.schedule_size() > 0) {
    std::printf("%-17s %12s %6s %6s\n", "client", "ms/step", "steps", "group");
    for (const v1::ClientSchedule& c : r.schedule()) {
      std::printf("%-17s %12s %6lld %6s\n", c.client_id().c_str(),
                  c.has_speed() ? std::to_string(c.ms_per_step()).c_str() : "-",
                  static_cast<long long>(c.local_steps()), c.group() ? std::to_string(c.group()).c_str() : "-");
    }
  }
  if (!r.error().empty()) std::printf("error             %s\n", r.error().c_str());
}

void RunPeerStatus(const std::string& peer, bool json, double timeout_s, const std::array<std::string, 4>& files) {
  std::shared_ptr<const gossip::TlsContext> tls;
  const int tls_flags = !files[0].empty() + !files[1].empty() + !files[2].empty();
  if (tls_flags != 0 && tls_flags != 3) {
    throw CommandError("a peer with mutual TLS needs all of --tls-ca, --tls-cert and --tls-key");
  }
  if (tls_flags == 3) {
    tls =
        Take(gossip::TlsContext::Create(ReadFileForFlag(files[0], "--tls-ca"), ReadFileForFlag(files[1], "--tls-cert"),
                                        ReadFileForFlag(files[2], "--tls-key")));
  }
  gossip::PeerStatusReport r = Take(gossip::QueryPeerStatus(peer, tls, timeout_s * 1000), "status of peer " + peer);
  if (json) {
    nlohmann::json j = {{"node", r.node},
                        {"nodes", r.nodes},
                        {"run", r.run},
                        {"rounds_completed", r.rounds_completed},
                        {"rounds", r.rounds},
                        {"accuracy", r.accuracy ? nlohmann::json(*r.accuracy) : nlohmann::json()},
                        {"accuracy_round", r.accuracy_round},
                        {"bytes_sent", r.bytes_sent},
                        {"bytes_received", r.bytes_received},
                        {"frames_refused", r.frames_refused}};
    j["members"] = nlohmann::json::array();
    for (const gossip::MemberUpdate& m : r.members) {
      j["members"].push_back({{"node", m.node},
                              {"address", m.address},
                              {"incarnation", m.incarnation},
                              {"state", gossip::MemberStateName(m.state)}});
    }
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("peer              %u of %zu (%s)\n", r.node, r.nodes, r.run.c_str());
  std::printf("round             %llu of %llu\n", static_cast<unsigned long long>(r.rounds_completed),
              static_cast<unsigned long long>(r.rounds));
  if (r.accuracy) {
    std::printf("accuracy          %.4f (own model, after %llu rounds)\n", *r.accuracy,
                static_cast<unsigned long long>(r.accuracy_round));
  }
  std::printf("traffic           %llu bytes sent, %llu received, %llu frames refused\n",
              static_cast<unsigned long long>(r.bytes_sent), static_cast<unsigned long long>(r.bytes_received),
              static_cast<unsigned long long>(r.frames_refused));
  std::printf("%-6s %-24s %s\n", "node", "address", "state");
  for (const gossip::MemberUpdate& m : r.members) {
    std::printf("%-6u %-24s %s%s\n", m.node, m.address.c_str(), gossip::MemberStateName(m.state),
                m.node == r.node ? " (itself)" : "");
  }
}

}  // namespace

void AddStatusCommand(CLI::App& app) {
  auto server = std::make_shared<std::string>("127.0.0.1:50051");
  auto json = std::make_shared<bool>(false);
  auto timeout = std::make_shared<double>(5.0);
  auto tls_files = std::make_shared<std::array<std::string, 4>>();
  auto peer = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("status", "Show a running server's federation status, or a peer's (--peer)");
  auto* server_opt = cmd->add_option("--server", *server, "Server address, HOST:PORT")->capture_default_str();
  cmd->add_option("--peer", *peer, "Ask a running plexus peer at HOST:PORT instead: its round, neighbours, accuracy")
      ->excludes(server_opt);
  cmd->add_flag("--json", *json, "Print JSON");
  cmd->add_option("--timeout-s", *timeout, "Give up after this many seconds")->capture_default_str();
  cmd->add_option("--tls-ca", (*tls_files)[0], "CA certificate (PEM) for a server with mutual TLS");
  cmd->add_option("--tls-cert", (*tls_files)[1], "Client certificate (PEM)");
  cmd->add_option("--tls-key", (*tls_files)[2], "Client private key (PEM)");
  cmd->add_option("--token-file", (*tls_files)[3], "Client token, for a server with token authentication");
  AddConfigOption(cmd);
  cmd->callback([=] {
    if (!peer->empty()) {
      if (!(*tls_files)[3].empty()) throw CommandError("--token-file is for servers; a peer takes --tls-*");
      return RunPeerStatus(*peer, *json, *timeout, *tls_files);
    }
    ClientTls tls;
    if (!(*tls_files)[0].empty()) tls.ca_pem = ReadFileForFlag((*tls_files)[0], "--tls-ca");
    if (!(*tls_files)[1].empty()) tls.cert_pem = ReadFileForFlag((*tls_files)[1], "--tls-cert");
    if (!(*tls_files)[2].empty()) tls.key_pem = ReadFileForFlag((*tls_files)[2], "--tls-key");
    if (!(*tls_files)[3].empty()) tls.token = ReadTokenFile((*tls_files)[3]);
    RunStatus(*server, *json, *timeout, tls);
  });
}

}  // namespace plexus::cli
