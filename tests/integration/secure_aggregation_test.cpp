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

  std::filesystem::path dir_;
};

TEST_F(SecureAggregationTest, TwentyClientsOverMutualTlsThreeStopAtDifferentStagesTheRoundPublishesTheirFedAvg) {
  const int n = 20;
  ASSERT_TRUE(cli::CreateCertificateAuthority(Path("certs"), 1).ok());
  ASSERT_TRUE(cli::IssueCertificate(Path("certs"), "localhost", cli::CertificateKind::kServer, 1).ok());
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(cli::IssueCertificate(Path("certs"), "c" + std::to_string(i), cli::CertificateKind::kClient, 1).ok());
  }
  const std::string port = std::to_string(FreePort());
  const std::string db = Path("server.db");
  // Each stage lasts at most the round deadline: the three stages a member leaves wait it out.
  ChildProcess server(PLEXUS_BINARY,
                      {"server",
                       "--listen",
                       "127.0.0.1:" + port,
                       "--db",
                       db,
                       "--rounds",
                       "1",
                       "--clients-per-round",
                       std::to_string(n),
                       "--min-clients",
                       std::to_string(n),
                       "--local-steps",
                       "10",
                       "--secagg",
                       "--round-deadline-s",
                       "20",
                       "--linger-s",
                       "5",
                       "--test-subset",
                       "1000",
                       "--tls-cert",
                       Path("certs/localhost.crt"),
                       "--tls-key",
                       Path("certs/localhost.key"),
                       "--tls-ca",
                       Path("certs/ca.crt")},
                      Path("server.log"));
  // c0 leaves before sharing its keys, c1 before sending its masked update (its pairwise masks
  // are then taken back with its neighbours' shares), c2 before revealing shares (its update
  // is in the sum, the others unmask it).
  const std::map<int, std::string> quits = {{0, "share keys"}, {1, "masked input"}, {2, "unmask"}};
  std::vector<std::unique_ptr<ChildProcess>> clients;
  for (int i = 0; i < n; ++i) {
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
    if (quits.count(i)) {
      args.push_back("--quit-at-secagg-stage");
      args.push_back(quits.at(i));
    }
    clients.push_back(std::make_unique<ChildProcess>(PLEXUS_BINARY, args, Path(name + ".log")));
  }
  ASSERT_EQ(server.Wait(240000), 0) << server.Log();
  for (int i = 0; i < n; ++i) {
    const int code = clients[i]->Wait(60000);
    if (quits.count(i)) {
      EXPECT_NE(code, 0) << "c" << i;
      EXPECT_NE(clients[i]->Log().find("quitting at stage '" + quits.at(i) + "'"), std::string::npos)
          << clients[i]->Log();
    } else {
      EXPECT_EQ(code, 0) << clients[i]->Log();
    }
  }

  // The round's record: everyone but the two that left before their masked update.
  auto store = SqliteStore::Open(db);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const std::vector<RoundRecord> rounds = *(*store)->ListRounds();
  ASSERT_EQ(rounds.size(), 1u);
  std::vector<std::string> included;
  for (const MergedUpdate& m : rounds[0].merged) included.push_back(m.client_id);
  std::sort(included.begin(), included.end());
  std::vector<std::string> expected_ids;
  for (int i = 2; i < n; ++i) expected_ids.push_back("c" + std::to_string(i));
  std::sort(expected_ids.begin(), expected_ids.end());
  EXPECT_EQ(included, expected_ids);
  EXPECT_EQ(rounds[0].num_updates, n - 2);
  // Nothing of any one client's update is stored: no accepted update in any attempt.
  for (int64_t attempt = 0; attempt < 3; ++attempt) {
    Result<std::vector<Update>> updates = (*store)->ListAcceptedUpdates(1, attempt);
    ASSERT_TRUE(updates.ok());
    EXPECT_TRUE(updates->empty());
  }
  store->reset();

  // FedAvg of the included clients' clipped updates, from their own copies.
  const ModelState v0 = Exported(db, 0), v1 = Exported(db, 1);
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
  setup.params.members.resize(n);
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
  std::printf("secure round: %zu of %d included, largest difference from FedAvg %.3g (bound %.3g)\n", included.size(),
              n, worst, bound);
}

}  // namespace
}  // namespace plexus
