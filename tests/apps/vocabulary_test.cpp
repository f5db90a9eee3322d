// One vocabulary across the plexus commands (docs/vocabulary.md): every subcommand's --help is
// parsed, and a concept spelled two ways, an old spelling still shown, or a flag whose default
// differs between commands (beyond the differences the table names, each for a reason) fails.
// Old spellings still work for a release, with a warning.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/integration/process.h"

namespace plexus {
namespace {

using ::plexus::testing::RunToCompletion;

const std::vector<std::vector<std::string>> kCommands = {
    {"server"},  {"client"},          {"sim"},           {"peer"},          {"status"}, {"export"}, {"merge"}, {"plot"},
    {"privacy"}, {"tokens", "issue"}, {"certs", "init"}, {"certs", "issue"}};

// Flag name -> default shown in --help (nullopt: none shown), for one command.
std::map<std::string, std::optional<std::string>> HelpFlags(const std::vector<std::string>& command) {
  std::vector<std::string> args = command;
  args.push_back("--help");
  std::string out;
  EXPECT_EQ(RunToCompletion(PLEXUS_BINARY, args, &out), 0) << out;
  // "  --name TYPE[:CHECK][ in [A - B]]=DEFAULT  description": the default ends the type.
  static const std::regex kLine(R"(^\s+(?:-\w,)?--([a-z0-9-]+)(?: (\S+(?: in \[[^\]]*\]\S*)?))?(?:\s.*)?$)");
  std::map<std::string, std::optional<std::string>> flags;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_match(line, m, kLine)) continue;
    const std::string type = m[2].str();
    const size_t eq = type.find('=');
    flags[m[1].str()] = eq == std::string::npos ? std::nullopt : std::optional<std::string>(type.substr(eq + 1));
  }
  EXPECT_TRUE(flags.count("help")) << "no flag parsed from: " << out;
  return flags;
}

std::string Name(const std::vector<std::string>& command) {
  std::string s;
  for (const std::string& c : command) s += (s.empty() ? "" : " ") + c;
  return s;
}

TEST(VocabularyTest, EveryConceptHasOneSpellingAndOneDefaultAcrossCommands) {
  std::map<std::string, std::map<std::string, std::optional<std::string>>> by_flag;  // flag -> command -> default
  for (const auto& command : kCommands) {
    for (const auto& [flag, def] : HelpFlags(command)) by_flag[flag][Name(command)] = def;
  }
  ASSERT_GT(by_flag.size(), 100u);

  // Concepts once spelled two ways, and names that would spell one of them again.
  const std::vector<std::set<std::string>> kSynonyms = {
      {"tls-ca", "tls-client-ca", "ca", "ca-file"},
      {"federated-eval-split", "eval-split", "eval-holdout"},
      {"test-split", "eval-split", "holdout"},
      {"rounds", "num-rounds"},
      {"clients-per-round", "sample-size", "clients-sampled"},
      {"lr", "learning-rate"},
      {"seed", "random-seed"},
      {"summary-out", "summary", "summary-json"},
      {"metrics-out", "metrics-csv"},
      {"give-up-s", "give-up", "retry-for-s"},
  };
  for (const auto& group : kSynonyms) {
    std::set<std::string> used;
    for (const std::string& name : group) {
      if (by_flag.count(name)) used.insert(name);
    }
    std::string list;
    for (const std::string& u : used) list += " --" + u;
    EXPECT_LE(used.size(), 1u) << "one concept, spelled" << list;
  }
  for (const char* old : {"tls-client-ca", "eval-split"}) EXPECT_EQ(by_flag.count(old), 0u) << "--" << old;

  // Flags whose default differs between commands because the concept does (docs/vocabulary.md).
  const std::set<std::string> kDifferentByDesign = {
      "listen",    // a server's port (50051) and a peer's (7070)
      "server",    // what client and status reach by default; a peer's optional server; certs' switch
      "db",        // a server's state (plexus.db); a peer's optional one; the file export reads
      "model",     // a client takes the server's model; the others train one
      "out",       // each command's own output file
      "linger-s",  // a server waits for its clients to hear it finished (at most 30 s); a peer sends what is queued
      "threads",   // LibTorch's threads where a command trains or evaluates; the strategy's fold in merge
  };
  for (const auto& [flag, commands] : by_flag) {
    if (commands.size() < 2 || kDifferentByDesign.count(flag)) continue;
    std::set<std::optional<std::string>> defaults;
    std::string seen;
    for (const auto& [command, def] : commands) {
      defaults.insert(def);
      seen += " " + command + "=" + def.value_or("(none)");
    }
    EXPECT_EQ(defaults.size(), 1u) << "--" << flag << " has different defaults:" << seen;
  }
}

// The old spellings (kept for a release) still set the new flag, and say so.
TEST(VocabularyTest, OldSpellingsStillWorkWithAWarning) {
  const std::string ca =
      (std::filesystem::temp_directory_path() / ("plexus_vocab_" + std::to_string(::getpid()))).string();
  std::ofstream(ca) << "not read by --dry-run\n";
  std::string out;
  ASSERT_EQ(RunToCompletion(PLEXUS_BINARY,
                            {"server", "--tls-client-ca", ca, "--tls-cert", ca, "--tls-key", ca, "--dry-run"}, &out),
            0)
      << out;
  EXPECT_NE(out.find("--tls-client-ca is now --tls-ca"), std::string::npos) << out;
  EXPECT_NE(out.find("  --tls-ca = " + ca + "  (command line)"), std::string::npos) << out;
  const std::string cfg = ca + ".toml";
  std::ofstream(cfg) << "eval-split = 0.2\n";
  ASSERT_EQ(RunToCompletion(PLEXUS_BINARY, {"sim", "--config", cfg, "--dry-run"}, &out), 0) << out;
  EXPECT_NE(out.find("config '" + cfg + "': --eval-split is now --test-split"), std::string::npos) << out;
  EXPECT_NE(out.find("  --test-split = 0.2  (config " + cfg + ")"), std::string::npos) << out;
  std::filesystem::remove(ca);
  std::filesystem::remove(cfg);
}

}  // namespace
}  // namespace plexus
