// Secure aggregation in a real federation: a plexus server with --secagg and twenty plexus client
// processes over mutual TLS on 127.0.0.1, three of which stop at different stages of the round's
// group. The published model must be the plain FedAvg of the updates that arrived, computed here
// from the copies the clients kept of their own updates (--save-updates), and the server must
// hold no update of any one client.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "apps/plexus/certificate_authority.h"
#include "core/file_contents.h"
#include "core/safetensors.h"
#include "privacy/secagg_exchange.h"
#include "server/store/sqlite_store.h"
#include "tests/integration/process.h"

namespace plexus {
namespace {

using ::plexus::testing::ChildProcess;
using ::plexus::testing::FreePort;

class SecureAggregationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist")) GTEST_SKIP() << "dataset not installed";
    dir_ = std::filesystem::temp_directory_path() / ("plexus_secagg_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    if (HasFailure()) testing::PrintLogs(dir_.string(), 2000);
    std::filesystem::remove_all(dir_);
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // The model of `version` in the server's database, through plexus export.
  ModelState Exported(const std::string& db, int version) {
    const std::string out = Path("v" + std::to_string(version) + ".safetensors");
    std::string log;
    EXPECT_EQ(testing::RunToCompletion(
                  PLEXUS_BINARY, {"export", "--db", db, "--version", std::to_string(version), "--out", out}, &log),
              0)
        << log;
    Result<std::string> bytes = ReadFileContents(out);
    EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
    Result<ModelState> model = DecodeSafetensors(bytes.ok() ? *bytes : "");
    EXPECT_TRUE(model.ok()) << model.status().ToString();
    return model.ok() ? std::move(model).value() : ModelState();
  }

  void Certificates(int n) {
    ASSERT_TRUE(cli::CreateCertificateAuthority(Path("certs"), 1).ok());
    ASSERT_TRUE(cli::IssueCertificate(Path("certs"), "localhost", cli::CertificateKind::kServer, 1).ok());
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(cli::IssueCertificate(Path("certs"), "c" + std::to_string(i), cli::CertificateKind::kClient, 1).ok());
    }
  }
  // A server of one version over mutual TLS, with `extra` flags.
  ChildProcess StartServer(const std::string& port, const std::string& db, const std::vector<std::string>& extra) {
    std::vector<std::string> args{"server",
                                  "--listen",
                                  "127.0.0.1:" + port,
                                  "--db",
                                  db,
                                  "--rounds",
                                  "1",
                                  "--local-steps",
                                  "10",
                                  "--linger-s",
                                  "5",
                                  "--test-subset",
                                  "1000",
                                  "--tls-cert",
                                  Path("certs/localhost.crt"),
                                  "--tls-key",
                                  Path("certs/localhost.key"),
                                  "--tls-ca",
                                  Path("certs/ca.crt")};
    args.insert(args.end(), extra.begin(), extra.end());
    return ChildProcess(PLEXUS_BINARY, args, Path("server.log"));
  }
  // Client ci of n (its own IID share), keeping copies of its updates, with `extra` flags.
  std::unique_ptr<ChildProcess> StartClient(int i, int n, const std::string& port,
                                            const std::vector<std::string>& extra) {
    const std::string name = "c" + std::to_string(i);
    std::vector<std::string> args{"client",
                                  "--server",
                                  "localhost:" + port,
                                  "--partition",
                                  "iid",
                                  "--num-partitions",
                                  std::to_string(n),
                                  "--partition-index",
                                  std::to_string(i),
                                  "--tls-ca",
                                  Path("certs/ca.crt"),
                                  "--tls-cert",
                                  Path("certs/" + name + ".crt"),
                                  "--tls-key",
                                  Path("certs/" + name + ".key"),
                                  "--save-updates",
                                  Path("updates/" + name),
                                  "--give-up-s",
                                  "60"};
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<ChildProcess>(PLEXUS_BINARY, args, Path(name + ".log"));
  }

  // Every client ends: those in `quits` with an error after saying they quit at that stage.
  static void WaitForClients(const std::vector<std::unique_ptr<ChildProcess>>& clients,
                             const std::map<int, std::string>& quits) {
    for (int i = 0; i < static_cast<int>(clients.size()); ++i) {
      const int code = clients[i]->Wait(60000);
      if (quits.count(i)) {
        EXPECT_NE(code, 0) << "c" << i;
        EXPECT_NE(clients[i]->Log().find("quitting at stage '" + quits.at(i) + "'"), std::string::npos)
            << clients[i]->Log();
      } else {
        EXPECT_EQ(code, 0) << clients[i]->Log();
      }
    }
  }
  // The clients merged into the database's one version, sorted.
  static std::vector<std::string> IncludedInTheOnlyVersion(SqliteStore& store) {
    const std::vector<RoundRecord> versions = *store.ListRounds();
    EXPECT_EQ(versions.size(), 1u);
    std::vector<std::string> included;
    if (versions.empty()) return included;
    for (const MergedUpdate& m : versions[0].merged) included.push_back(m.client_id);
    std::sort(included.begin(), included.end());
    return included;
  }
  // Version `version` of the database minus the one before it is the FedAvg (weights capped at
  // 65536 examples) of the clipped updates that `included` kept (--save-updates), within the
  // encoding's rounding bound for a group of `members`.
  void ExpectVersionIsFedAvgOf(const std::string& db, int version, const std::vector<std::string>& included,
                               int members) {
    // FedAvg of the included clients' clipped updates, from their own copies.
    const ModelState v0 = Exported(db, version - 1), v1 = Exported(db, version);
    ASSERT_EQ(v0.num_params(), v1.num_params());
    const size_t p = v0.num_params();
    std::vector<double> sum(p, 0.0);
    double weight = 0;
    for (const std::string& id : included) {
      std::vector<std::filesystem::path> files;
      for (const auto& e : std::filesystem::directory_iterator(Path("updates/" + id))) files.push_back(e.path());
      ASSERT_EQ(files.size(), 1u) << id;
      const std::string name = files[0].filename().string();  // TASK.nEXAMPLES.safetensors
      const size_t at = name.rfind(".n");
      const int64_t examples = std::stoll(name.substr(at + 2));
      const ModelState delta = *DecodeSafetensors(*ReadFileContents(files[0].string()));
      ASSERT_EQ(delta.num_params(), p);
      const double w = static_cast<double>(std::min<int64_t>(examples, 65536)) / 65536.0;
      weight += w;
      for (size_t j = 0; j < p; ++j) sum[j] += w * std::clamp<double>(delta.data()[j], -1.0, 1.0);
    }
    secagg::Setup setup;
    setup.params.members.resize(static_cast<size_t>(members));
    setup.params.length = p + 1;
    setup.clip = 1.0;
    setup.weight_cap = 65536;
    const double bound =
        secagg::WeightedEncoding::For(setup)->MeanBound(static_cast<int64_t>(included.size()), weight * 0.999) +
        3e-7;  // float32 rounding of the two models' values (all below 2 in size)
    double worst = 0;
    for (size_t j = 0; j < p; ++j) {
      ASSERT_LT(std::abs(v1.data()[j]), 2.0f);
      const double published = static_cast<double>(v1.data()[j]) - v0.data()[j];
      worst = std::max(worst, std::abs(published - sum[j] / weight));
    }
    EXPECT_LE(worst, bound) << "the published change differs from the FedAvg of the included updates";
    std::printf("secure group: %zu of %d included, largest difference from FedAvg %.3g (bound %.3g)\n", included.size(),
                members, worst, bound);
  }

  std::filesystem::path dir_;
};

TEST_F(SecureAggregationTest, TwentyClientsOverMutualTlsThreeStopAtDifferentStagesTheRoundPublishesTheirFedAvg) {
  const int n = 20;
  Certificates(n);
  const std::string port = std::to_string(FreePort());
  const std::string db = Path("server.db");
  // Each stage lasts at most the round deadline: the three stages a member leaves wait it out.
  ChildProcess server = StartServer(port, db,
                                    {"--clients-per-round", std::to_string(n), "--min-clients", std::to_string(n),
                                     "--secagg", "--round-deadline-s", "20"});
  // c0 leaves before sharing its keys, c1 before sending its masked update (its pairwise masks
  // are then taken back with its neighbours' shares), c2 before revealing shares (its update
  // is in the sum, the others unmask it).
  const std::map<int, std::string> quits = {{0, "share keys"}, {1, "masked input"}, {2, "unmask"}};
  std::vector<std::unique_ptr<ChildProcess>> clients;
  for (int i = 0; i < n; ++i) {
    std::vector<std::string> extra;
    if (quits.count(i)) extra = {"--quit-at-secagg-stage", quits.at(i)};
    clients.push_back(StartClient(i, n, port, extra));
  }
  ASSERT_EQ(server.Wait(240000), 0) << server.Log();
  WaitForClients(clients, quits);

  // The round's record: everyone but the two that left before their masked update.
  auto store = SqliteStore::Open(db);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const std::vector<std::string> included = IncludedInTheOnlyVersion(**store);
  std::vector<std::string> expected_ids;
  for (int i = 2; i < n; ++i) expected_ids.push_back("c" + std::to_string(i));
  std::sort(expected_ids.begin(), expected_ids.end());
  EXPECT_EQ(included, expected_ids);
  EXPECT_EQ((*(*store)->ListRounds())[0].num_updates, n - 2);
  // Nothing of any one client's update is stored: no accepted update in any attempt.
  for (int64_t attempt = 0; attempt < 3; ++attempt) {
    Result<std::vector<Update>> updates = (*store)->ListAcceptedUpdates(1, attempt);
    ASSERT_TRUE(updates.ok());
    EXPECT_TRUE(updates->empty());
  }
  store->reset();

  ExpectVersionIsFedAvgOf(db, 1, included, n);
}

// FedBuff with secure aggregation: a buffer of 10 is one group of 12 (two spares). The members
// train at different speeds (--slowdown), so their masked updates arrive in an order of their
// own; one leaves before sending its update. The version is the FedAvg of the eleven that
// arrived (the first version: no staleness), and the server holds none of their updates.
TEST_F(SecureAggregationTest, FedBuffBufferAsASecureGroupPublishesTheFedAvgOfWhoeverArrivedInAnyOrder) {
  const int n = 12;
  Certificates(n);
  const std::string port = std::to_string(FreePort());
  const std::string db = Path("server.db");
  ChildProcess server =
      StartServer(port, db, {"--mode", "async", "--buffer-size", "10", "--secagg", "stage-s=20,input-s=15"});
  const double slowdowns[n] = {3.0, 1.0, 2.5, 1.5, 1.0, 4.0, 2.0, 1.0, 3.5, 1.2, 2.2, 1.8};
  std::vector<std::unique_ptr<ChildProcess>> clients;
  for (int i = 0; i < n; ++i) {
    std::vector<std::string> extra{"--slowdown", std::to_string(slowdowns[i])};
    if (i == 4) extra.insert(extra.end(), {"--quit-at-secagg-stage", "masked input"});
    clients.push_back(StartClient(i, n, port, extra));
  }
  ASSERT_EQ(server.Wait(240000), 0) << server.Log();
  WaitForClients(clients, {{4, "masked input"}});
  auto store = SqliteStore::Open(db);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const std::vector<std::string> included = IncludedInTheOnlyVersion(**store);
  std::vector<std::string> expected_ids;
  for (int i = 0; i < n; ++i) {
    if (i != 4) expected_ids.push_back("c" + std::to_string(i));
  }
  std::sort(expected_ids.begin(), expected_ids.end());
  EXPECT_EQ(included, expected_ids);
  // The log of acknowledged updates holds only the group's mean, never a client's update.
  Result<std::vector<LoggedUpdate>> logged = (*store)->ListLoggedUpdates();
  ASSERT_TRUE(logged.ok());
  for (const LoggedUpdate& l : *logged) EXPECT_EQ(l.update.client_id, "secure-aggregation");
  store->reset();
  ExpectVersionIsFedAvgOf(db, 1, included, n);
}

}  // namespace
}  // namespace plexus
