// TOML config files for every subcommand, parsed with toml++ so that syntax errors come with
// line and column. Keys are flag names without the dashes (`clients-per-round = 4`; underscores
// work too). Each key that the command line does not set becomes a command-line flag, so flags
// on the command line win and CLI11 validates config values exactly as it validates flags.
#include <toml++/toml.h>

#include <cctype>
#include <charconv>
#include <cstdio>
#include <set>
#include <sstream>

#include "apps/plexus/commands.h"
#include "core/file_contents.h"
#include "core/host_port.h"

namespace plexus::cli {
namespace {

std::string Scalar(const std::string& file, const std::string& key, const toml::node& v) {
  if (v.is_string()) return *v.value<std::string>();
  if (v.is_integer()) return std::to_string(*v.value<int64_t>());
  if (v.is_floating_point()) {  // the shortest text that reads back as the same double: 0.2, not 0.2000...01
    char text[64];
    const auto end = std::to_chars(text, text + sizeof text, *v.value<double>()).ptr;
    return std::string(text, end);
  }
  if (v.is_boolean()) return *v.value<bool>() ? "true" : "false";
  throw CommandError("config '" + file + "': key '" + key + "' must be a string, number or boolean");
}

}  // namespace

void AddConfigOption(CLI::App* cmd) {
  // Read by ExpandConfigFile before CLI11 parses; declared here for --help and validation.
  cmd->add_option("--config", "TOML file with flag values (flags on the command line win)")->check(CLI::ExistingFile);
}

void AddScenarioOption(CLI::App* cmd) {
  cmd->add_option("--scenario", "TOML scenario: flag values as in --config (see simulations/scenarios/)")
      ->check(CLI::ExistingFile);
}

namespace {

// The flags ExpandConfigFile took from a file (without "--"), and the file: what --dry-run names as
// their source. Set once, before parsing, on the main thread.
std::set<std::string>& FlagsFromFile() {
  static std::set<std::string> flags;
  return flags;
}
std::string& SettingsFile() {
  static std::string file;
  return file;
}

}  // namespace

void PrintResolvedSettings(const CLI::App& cmd, const std::map<std::string, std::string>& derived) {
  std::printf("resolved settings of plexus %s (value, then where it came from):\n", cmd.get_name().c_str());
  for (const CLI::Option* opt : cmd.get_options()) {
    if (opt->get_lnames().empty()) continue;
    const std::string name = opt->get_lnames().front();
    if (name == "help" || name == "config" || name == "scenario" || name == "dry-run") continue;
    std::string value, source;
    if (derived.count(name)) {  // worked out after parsing: wins over the flag and its default
      std::printf("  --%s = %s\n", name.c_str(), derived.at(name).c_str());
      continue;
    }
    if (opt->count() > 0) {
      for (const std::string& r : opt->results()) value += (value.empty() ? "" : ",") + r;
      source = FlagsFromFile().count(name) ? "config " + SettingsFile() : "command line";
    } else {
      value = opt->get_default_str();
      source = "default";
    }
    // A switch left out; a flag given without its optional value (--secagg); or no default.
    if (value.empty()) {
      value = opt->get_items_expected_max() == 0 ? "false" : opt->count() > 0 ? "(given, its defaults)" : "(unset)";
    }
    std::printf("  --%s = %s  (%s)\n", name.c_str(), value.c_str(), source.c_str());
  }
  std::fflush(stdout);
}

namespace {

// Old spellings kept for a release (docs/vocabulary.md): rewritten to the current name before
// CLI11 parses, on the command line and in --config files, with a warning. So --help, "did you
// mean" and --dry-run know only the current name.
struct RenamedFlag {
  const char* command;
  const char* old_name;
  const char* name;
};
constexpr RenamedFlag kRenamedFlags[] = {
    {"server", "tls-client-ca", "tls-ca"},
    {"client", "eval-split", "federated-eval-split"},
    {"sim", "eval-split", "test-split"},
};

// `name` (without dashes) as `command` spells it now; warns when it was an old spelling.
std::string CurrentName(const std::string& command, const std::string& name, const std::string& where) {
  for (const RenamedFlag& r : kRenamedFlags) {
    if (command == r.command && name == r.old_name) {
      std::fprintf(stderr, "plexus: warning: %s--%s is now --%s (the old name goes in a later release)\n",
                   where.c_str(), r.old_name, r.name);
      return r.name;
    }
  }
  return name;
}

}  // namespace

std::vector<std::string> ExpandConfigFile(CLI::App& app, const std::vector<std::string>& in) {
  if (in.size() < 2) return in;
  std::vector<std::string> args = in;
  for (size_t i = 2; i < args.size(); ++i) {
    std::string& a = args[i];
    if (a.rfind("--", 0) != 0) continue;
    const size_t eq = a.find('=');
    const std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const std::string current = CurrentName(args[1], name, "");
    if (current != name) a = "--" + current + (eq == std::string::npos ? "" : a.substr(eq));
  }
  CLI::App* cmd = nullptr;
  try {
    cmd = app.get_subcommand(args[1]);
  } catch (const CLI::OptionNotFound&) {
    return args;  // CLI11 reports the unknown command
  }
  std::string file;
  std::set<std::string> given;
  for (size_t i = 2; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0) continue;
    const std::string name = a.substr(2, a.find('=') == std::string::npos ? std::string::npos : a.find('=') - 2);
    given.insert(name);
    if (name == "config" || name == "scenario")
      file = a.find('=') != std::string::npos ? a.substr(a.find('=') + 1) : (i + 1 < args.size() ? args[i + 1] : "");
  }
  if (file.empty()) return args;

  toml::table table;
  try {
    table = toml::parse_file(file);
  } catch (const toml::parse_error& e) {
    std::ostringstream msg;
    msg << "config '" << file << "': " << e.description() << " at line " << e.source().begin.line << ", column "
        << e.source().begin.column;
    throw CommandError(msg.str());
  }
  std::vector<std::string> out = args;
  for (const auto& [k, node] : table) {
    std::string key(k.str());
    for (char& c : key) c = c == '_' ? '-' : c;
    if (key == "description") continue;  // for people reading the file
    key = CurrentName(args[1], key, "config '" + file + "': ");
    const CLI::Option* opt = key == "config" || key == "scenario" ? nullptr : cmd->get_option_no_throw("--" + key);
    if (!opt) {
      throw CommandError("config '" + file + "': '" + std::string(k.str()) + "' is not a flag of 'plexus " + args[1] +
                         "' (see plexus " + args[1] + " --help)");
    }
    if (given.count(key)) continue;
    // One "--key=value" token works for options and switches alike (`no-eval = true`); an array
    // gives a flag that may repeat once per element (`task-config = ["noise=0.05", "schedule=cosine"]`).
    const toml::array* list = node.as_array();
    if (list && opt->get_multi_option_policy() == CLI::MultiOptionPolicy::TakeAll) {
      for (const toml::node& element : *list) out.push_back("--" + key + "=" + Scalar(file, key, element));
    } else {
      out.push_back("--" + key + "=" + Scalar(file, key, node));
    }
    FlagsFromFile().insert(key);
    SettingsFile() = file;
  }
  return out;
}

std::string ReadFileForFlag(const std::string& path, const std::string& flag) {
  Result<std::string> bytes = ReadFileContents(path);
  if (!bytes.ok()) throw CommandError(flag + ": " + bytes.status().message());
  return std::move(bytes).value();
}

bool IsLoopback(const std::string& host_port) {
  Result<HostPort> parsed = ParseHostPort(host_port);
  return parsed.ok() && IsLoopbackHost(parsed->host);
}

std::string ReadTokenFile(const std::string& path) {
  std::string token = ReadFileForFlag(path, "--token-file");
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  if (token.empty()) throw CommandError("--token-file " + path + " is empty");
  return token;
}

void Check(const Status& s, const std::string& context) {
  if (s.ok()) return;
  throw CommandError(context.empty() ? s.ToString() : context + ": " + s.ToString());
}

}  // namespace plexus::cli
