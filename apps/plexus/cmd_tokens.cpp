#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "apps/plexus/commands.h"
#include "core/file_contents.h"
#include "core/model_state.h"
#include "server/rpc/token_registry.h"

namespace plexus::cli {
namespace {

// 32 random bytes from OpenSSL's generator, as hex.
std::string NewToken() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof bytes) != 1) throw CommandError("cannot draw random bytes for a token");
  return LowerHex(bytes);
}

void IssueToken(const std::string& client, const std::string& tokens_file, std::string token_out) {
  if (client.empty() || client.find_first_of(" \t#\n") != std::string::npos) {
    throw CommandError("--client must be a name without spaces or '#'");
  }
  if (token_out.empty()) token_out = client + ".token";
  std::string existing;
  if (Result<std::string> read = ReadFileContents(tokens_file); read.ok()) {
    existing = std::move(read).value();
  } else if (::access(tokens_file.c_str(), F_OK) == 0) {  // there, but unreadable: never overwrite it
    throw CommandError("--tokens: " + read.status().message());
  }
  const std::string token = NewToken();
  const std::string updated = existing + (existing.empty() || existing.back() == '\n' ? "" : "\n") +
                              TokenRegistry::EntryFor(client, token) + "\n";
  Take(TokenRegistry::Parse(updated), tokens_file);  // refuses a client listed twice
  {
    std::ofstream out(token_out, std::ios::trunc);
    if (!out) throw CommandError("cannot write " + token_out);
    out << token << "\n";
  }
  ::chmod(token_out.c_str(), 0600);
  std::ofstream out(tokens_file, std::ios::app);
  if (!out) throw CommandError("cannot append to " + tokens_file);
  out << updated.substr(existing.size());
  std::printf(
      "issued a token for %s: the token is in %s (give it to the client only), its hash in %s (for "
      "plexus server --tokens)\n",
      client.c_str(), token_out.c_str(), tokens_file.c_str());
}

}  // namespace

void AddTokensCommand(CLI::App& app) {
  auto client = std::make_shared<std::string>();
  auto file = std::make_shared<std::string>("tokens.txt");
  auto out = std::make_shared<std::string>();
  CLI::App* tokens = app.add_subcommand("tokens", "Issue client tokens for token authentication (no certificates)");
  tokens->require_subcommand(1);
  CLI::App* issue = tokens->add_subcommand("issue", "Create a token for a client and list its hash for the server");
  issue->add_option("--client", *client, "Client name; the token makes its holder this client")->required();
  issue->add_option("--file", *file, "Token hash file for plexus server --tokens (appended to)")->capture_default_str();
  issue->add_option("--token-out", *out, "Where to write the token itself (default: CLIENT.token, mode 0600)");
  issue->callback([=] { IssueToken(*client, *file, *out); });
}

}  // namespace plexus::cli
