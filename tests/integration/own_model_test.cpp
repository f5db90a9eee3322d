// A user's own model and data, end to end, with PyTorch itself (Debian's python3-torch) on both
// sides: own_model.py defines and scripts a model that is not a built-in (with BatchNorm) and
// writes a data set as CSV and safetensors; a server with no data and three clients federate it
// with federated evaluation only; the exported TorchScript file, loaded by torch.jit.load, scores
// what the federation reported.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "core/file_contents.h"
#include "tests/integration/process.h"

namespace plexus {
namespace {

using ::plexus::testing::ChildProcess;
using ::plexus::testing::FreePort;
using ::plexus::testing::RunToCompletion;

constexpr const char* kPython = "/usr/bin/python3";  // Debian's, with python3-torch
const std::string kScript = std::string(PLEXUS_SOURCE_DIR) + "/tests/integration/own_model.py";

// A JSON file; a missing or malformed one throws, failing the test that reads it.
nlohmann::json ReadJson(const std::string& path) {
  Result<std::string> text = ReadFileContents(path);
  return nlohmann::json::parse(text.ok() ? *text : std::string());
}

class OwnModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string out;
    if (RunToCompletion(kPython, {"-c", "import torch"}, &out) != 0) {
      GTEST_SKIP() << "PyTorch for Python (Debian's python3-torch) is not installed: " << out;
    }
    dir_ = std::filesystem::temp_directory_path() / ("plexus_own_model_" + std::to_string(::getpid()) + "_" +
                                                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    ASSERT_EQ(RunToCompletion(kPython, {kScript, "make", dir_.string()}, &out), 0) << out;
    model_ = Path("model.pt");
  }
  void TearDown() override {
    if (HasFailure()) testing::PrintLogs(dir_.string(), 3000);
    std::filesystem::remove_all(dir_);
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  // `plexus peer` i of the peers at `addresses` (each its partition of train.csv, `model`,
  // learning rate 0.05), with `extra` flags.
  std::vector<std::string> PeerArgs(int i, const std::vector<std::string>& addresses, const std::string& model,
                                    const std::vector<std::string>& extra) const {
    std::string all;
    for (const std::string& a : addresses) all += (all.empty() ? "" : ",") + a;
    std::vector<std::string> args{"peer",
                                  "--listen",
                                  addresses[static_cast<size_t>(i)],
                                  "--peers",
                                  all,
                                  "--num-partitions",
                                  std::to_string(addresses.size()),
                                  "--partition-index",
                                  std::to_string(i),
                                  "--model",
                                  model,
                                  "--data",
                                  Path("train.csv"),
                                  "--lr",
                                  "0.05"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }
  static std::vector<std::string> Addresses(int n) {
    std::vector<std::string> out;
    for (int i = 0; i < n; ++i) out.push_back("127.0.0.1:" + std::to_string(FreePort()));
    return out;
  }
  // Runs `args` twice: the same model hash both times, and a final test accuracy above `least`.
  static void ExpectTheSameModelTwiceAndAccuracyAbove(const std::vector<std::string>& args, double least) {
    std::string first, second;
    ASSERT_EQ(RunToCompletion(PLEXUS_BINARY, args, &first), 0) << first;
    ASSERT_EQ(RunToCompletion(PLEXUS_BINARY, args, &second), 0) << second;
    const auto sha = [](const std::string& out) { return out.substr(out.find("model sha256") + 13, 64); };
    EXPECT_EQ(sha(first), sha(second));
    const size_t at = first.find("final test accuracy ");
    ASSERT_NE(at, std::string::npos) << first;
    EXPECT_GT(std::stod(first.substr(at + 20)), least) << first;
  }

  std::filesystem::path dir_;
  std::string model_;
};

TEST_F(OwnModelTest, AFederationOfAPyTorchModelOnCsvAndSafetensorsScoresInPyTorchWhatItReported) {
  const std::string address = "127.0.0.1:" + std::to_string(FreePort());
  const std::string db = Path("server.db");
  // The server has no data: the only accuracy is the clients' (federated evaluation).
  ChildProcess server(PLEXUS_BINARY,
                      {"server",
                       "--listen",
                       address,
                       "--db",
                       db,
                       "--model",
                       model_,
                       "--rounds",
                       "8",
                       "--clients-per-round",
                       "3",
                       "--min-clients",
                       "3",
                       "--lr",
                       "0.05",
                       "--federated-eval-every",
                       "4",
                       "--federated-eval-fraction",
                       "1",
                       "--summary-out",
                       Path("summary.json"),
                       "--metrics-out",
                       Path("metrics.csv")},
                      Path("server.log"));
  std::vector<std::unique_ptr<ChildProcess>> clients;
  for (int i = 0; i < 3; ++i) {
    // The same examples as CSV for two clients and as safetensors for the third.
    const std::string data = Path(i < 2 ? "train.csv" : "train.safetensors");
    clients.push_back(std::make_unique<ChildProcess>(
        PLEXUS_BINARY,
        std::vector<std::string>{"client", "--server", address, "--model", model_, "--data", data, "--num-partitions",
                                 "3", "--partition-index", std::to_string(i), "--federated-eval-split", "0.3"},
        Path("client" + std::to_string(i) + ".log")));
  }
  ASSERT_EQ(server.Wait(180000), 0) << server.Log();
  for (auto& c : clients) EXPECT_EQ(c->Wait(60000), 0) << c->Log();

  const nlohmann::json summary = ReadJson(Path("summary.json"));
  ASSERT_TRUE(summary["federated_test_accuracy"].is_number()) << summary.dump();
  EXPECT_TRUE(summary["final_test_accuracy"].is_null());  // the server evaluated nothing itself
  EXPECT_EQ(summary["federated_test_version"], 8);
  const double reported = summary["federated_test_accuracy"];
  const nlohmann::json& last = summary["rounds"].back();
  EXPECT_EQ(last["federated_clients"], 3);
  EXPECT_EQ(last["federated_examples"], 1800);  // 30% of each client's 2000 examples
  std::ifstream csv(Path("metrics.csv"));
  std::string header;
  std::getline(csv, header);
  EXPECT_NE(header.find("federated_test_accuracy"), std::string::npos);

  std::string out;
  ASSERT_EQ(
      RunToCompletion(
          PLEXUS_BINARY,
          {"export", "--db", db, "--format", "torchscript", "--model", model_, "--out", Path("federated.pt")}, &out),
      0)
      << out;
  ASSERT_EQ(RunToCompletion(PLEXUS_BINARY, {"export", "--db", db, "--out", Path("federated.safetensors")}, &out), 0)
      << out;
  ASSERT_EQ(RunToCompletion(
                kPython,
                {kScript, "evaluate", Path("federated.pt"), Path("holdout.csv"), Path("federated.safetensors")}, &out),
            0)
      << out;
  const nlohmann::json pytorch = nlohmann::json::parse(out.substr(out.find('{')));
  const double accuracy = pytorch["accuracy"];
  EXPECT_GT(accuracy, 0.9) << "chance is 0.25";
  EXPECT_NEAR(accuracy, reported, 0.01) << "PyTorch on the held-out file vs the federation's report";
  // The TorchScript file holds exactly the federation's final weights, BatchNorm statistics too.
  EXPECT_TRUE(pytorch["same_names"].get<bool>()) << out;
  EXPECT_EQ(pytorch["max_weight_difference"], 0.0) << out;
  EXPECT_EQ(pytorch["metadata"]["plexus.version"], "8");
  EXPECT_NE(pytorch["metadata"]["plexus.preprocess"].get<std::string>().find("none"), std::string::npos);
}

TEST_F(OwnModelTest, AClientWithAnotherModelFileIsToldWhyAtJoin) {
  const std::string address = "127.0.0.1:" + std::to_string(FreePort());
  ChildProcess server(PLEXUS_BINARY,
                      {"server", "--listen", address, "--db", Path("server.db"), "--model", model_, "--rounds", "1",
                       "--clients-per-round", "1", "--min-clients", "1", "--linger-s", "1"},
                      Path("server.log"));
  const std::string other = Path("wider.pt");  // takes the same data, another layout
  std::string out;
  EXPECT_NE(
      RunToCompletion(
          PLEXUS_BINARY,
          {"client", "--server", address, "--model", other, "--data", Path("train.csv"), "--give-up-s", "20"}, &out),
      0);
  EXPECT_NE(out.find("has another parameter layout"), std::string::npos) << out;
  // Without --model the client is told the server federates a TorchScript model.
  EXPECT_NE(RunToCompletion(PLEXUS_BINARY,
                            {"client", "--server", address, "--data", Path("train.csv"), "--give-up-s", "20"}, &out),
            0);
  EXPECT_NE(out.find("start this client with --model"), std::string::npos) << out;
  server.Signal(SIGTERM);
  server.Wait(30000);
}

TEST_F(OwnModelTest, BadFilesGetAnErrorNamingThemAndNothingTrains) {
  std::string out;
  const std::string not_a_model = Path("not_a_model.pt");
  std::ofstream(not_a_model) << "torch.save(model, 'x.pt') writes pickles, not TorchScript\n";
  EXPECT_NE(RunToCompletion(PLEXUS_BINARY, {"sim", "--model", not_a_model, "--data", Path("train.csv")}, &out), 0);
  EXPECT_NE(out.find("is not a TorchScript module"), std::string::npos) << out;

  const std::string ragged = Path("ragged.csv");
  std::ofstream(ragged) << "a,b,label\n1,2,0\n3,1\n";
  EXPECT_NE(RunToCompletion(PLEXUS_BINARY, {"sim", "--model", model_, "--data", ragged}, &out), 0);
  EXPECT_NE(out.find("ragged.csv:3"), std::string::npos) << out;

  // Labels beyond the model's four outputs.
  const std::string many = Path("many_classes.csv");
  {
    std::ofstream f(many);
    f << "f0,f1,f2,f3,f4,f5,f6,f7,f8,f9,f10,f11,label\n";
    for (int i = 0; i < 40; ++i) f << "1,2,3,4,5,6,7,8,9,10,11,12," << i % 7 << "\n";
  }
  EXPECT_NE(RunToCompletion(PLEXUS_BINARY, {"sim", "--model", model_, "--data", many, "--rounds", "1"}, &out), 0);
  EXPECT_NE(out.find("has 4 outputs, but the data has labels up to 6"), std::string::npos) << out;

  // A client given the model but no --data would read Fashion-MNIST, which this model cannot
  // take: it says so at start (before it looks for a server), not at its first task.
  if (std::filesystem::exists("/usr/share/datasets/fashion-mnist")) {
    EXPECT_EQ(RunToCompletion(PLEXUS_BINARY, {"client", "--server", "127.0.0.1:1", "--model", model_}, &out), 1);
    EXPECT_NE(out.find("cannot run on Fashion-MNIST (the built-in models' data: no --data was given)"),
              std::string::npos)
        << out;
  }
}

TEST_F(OwnModelTest, TheSimulatorRunsTheSameModelDeterministically) {
  const std::vector<std::string> args{"sim",
                                      "--model",
                                      model_,
                                      "--data",
                                      Path("train.safetensors"),
                                      "--clients",
                                      "6",
                                      "--clients-per-round",
                                      "3",
                                      "--rounds",
                                      "3",
                                      "--lr",
                                      "0.05",
                                      "--seed",
                                      "4"};
  ExpectTheSameModelTwiceAndAccuracyAbove(args, 0.9);
}

// Decentralized: the same model and data with no server. The gossip simulator repeats itself for
// a seed; three plexus peer processes train the model on their partitions of the CSV file and
// each scores its own model on its held-out share, and a peer's final model, exported from its
// database, runs in PyTorch; a peer with another model file is refused at the hello, the refusal
// naming both models.
TEST_F(OwnModelTest, TheGossipSimulatorRunsAUsersModelOnItsDataDeterministically) {
  const std::vector<std::string> args{
      "sim",      "--mode", "gossip", "--model", model_,   "--data", Path("train.safetensors"), "--clients", "6",
      "--rounds", "4",      "--lr",   "0.05",    "--seed", "4"};
  ExpectTheSameModelTwiceAndAccuracyAbove(args, 0.9);
}

TEST_F(OwnModelTest, PeersGossipAUsersModelOnItsDataAndRefuseAPeerWithAnotherModel) {
  const int n = 3;
  const std::vector<std::string> addresses = Addresses(n);
  // `db`: the peer's database file name.
  auto peer_args = [&](int i, const std::string& model, const std::string& db) {
    return PeerArgs(i, addresses, model,
                    {"--rounds", "6", "--gossip", "dpsgd", "--topology", "complete", "--linger-s", "1", "--summary-out",
                     Path("peer" + std::to_string(i) + ".json"), "--db", Path(db)});
  };
  // First a peer with another model file (the same data fits it) meets peer 0 alone: refused.
  {
    ChildProcess p0(PLEXUS_BINARY, peer_args(0, model_, "lonely0.db"), Path("lonely0.log"));
    std::vector<std::string> args = peer_args(1, Path("wider.pt"), "lonely1.db");
    args.insert(args.end(), {"--give-up-s", "5"});
    std::string out;
    EXPECT_NE(RunToCompletion(PLEXUS_BINARY, args, &out), 0) << out;
    p0.Signal(SIGTERM);
    p0.Wait(30000);
    const std::string log = p0.Log();
    EXPECT_NE(log.find("peer 1 runs '"), std::string::npos) << log;
    EXPECT_NE(log.find("torchscript:"), std::string::npos) << log;
  }
  std::vector<std::unique_ptr<ChildProcess>> peers;
  for (int i = 0; i < n; ++i) {
    peers.push_back(std::make_unique<ChildProcess>(PLEXUS_BINARY,
                                                   peer_args(i, model_, "peer" + std::to_string(i) + ".db"),
                                                   Path("peer" + std::to_string(i) + ".log")));
  }
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(peers[static_cast<size_t>(i)]->Wait(240000), 0) << peers[static_cast<size_t>(i)]->Log();
    std::ifstream in(Path("peer" + std::to_string(i) + ".json"));
    const nlohmann::json s = nlohmann::json::parse(in);
    EXPECT_EQ(s["rounds_completed"], 6) << "peer " << i;
    EXPECT_GT(s["final_test_accuracy"].get<double>(), 0.85) << "peer " << i << ": " << s.dump(2);
  }
  // A peer's model back to PyTorch: plexus export reads the peer's database, the file is the
  // peer's final model (its hash) and runs in PyTorch on data no peer trained on.
  std::ifstream in(Path("peer0.json"));
  const nlohmann::json s0 = nlohmann::json::parse(in);
  std::string out;
  ASSERT_EQ(RunToCompletion(PLEXUS_BINARY,
                            {"export", "--db", Path("peer0.db"), "--format", "torchscript", "--model", model_, "--out",
                             Path("peer0.pt")},
                            &out),
            0)
      << out;
  EXPECT_NE(out.find(s0["final_model_sha256"].get<std::string>()), std::string::npos) << out << s0.dump(2);
  std::string scored;
  ASSERT_EQ(RunToCompletion(kPython, {kScript, "evaluate", Path("peer0.pt"), Path("holdout.csv")}, &scored), 0)
      << scored;
  const nlohmann::json pytorch = nlohmann::json::parse(scored.substr(scored.find('{')));
  EXPECT_GT(pytorch["accuracy"].get<double>(), 0.85) << scored;
}

// The decentralized run of issue 43: four peers gossip the PyTorch-written model (BatchNorm
// included) on their partitions of the CSV file with Epidemic Learning; one is killed in the
// middle of the run and restarted from its database. Every peer ends within 2 points of the same
// model trained by FedAvg through a server on the same partitions (all tested on holdout.csv),
// and a peer's exported model scores in PyTorch what the peer reported.
TEST_F(OwnModelTest, FourPeersOneKilledAndRestartedMatchFedAvgThroughAServerAndScoreInPyTorch) {
  const int n = 4;
  const std::string rounds = "8";
  const std::vector<std::string> addresses = Addresses(n);
  auto start_peer = [&](int i, const std::string& log) {
    const std::string id = std::to_string(i);
    return std::make_unique<ChildProcess>(
        PLEXUS_BINARY,
        PeerArgs(i, addresses, model_,
                 {"--test-data", Path("holdout.csv"), "--rounds", rounds, "--gossip", "el:s=2", "--linger-s", "2",
                  "--db", Path("p" + id + ".db"), "--summary-out", Path("p" + id + ".json")}),
        Path(log));
  };
  std::vector<std::unique_ptr<ChildProcess>> peers;
  for (int i = 0; i < n; ++i) peers.push_back(start_peer(i, "p" + std::to_string(i) + ".log"));
  // Peer 3 is killed once it has completed round 3 (its status port says so), and restarted.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  int64_t reached = -1;
  while (reached < 3 && std::chrono::steady_clock::now() < deadline && peers[3]->running()) {
    std::string status;
    if (RunToCompletion(PLEXUS_BINARY, {"status", "--peer", addresses[3], "--json"}, &status) == 0 &&
        status.find('{') != std::string::npos) {
      reached = nlohmann::json::parse(status.substr(status.find('{')))["rounds_completed"].get<int64_t>();
    }
    if (reached < 3) std::this_thread::sleep_for(std::chrono::milliseconds(100));  // another process: polled
  }
  ASSERT_GE(reached, 3) << peers[3]->Log();
  peers[3]->Signal(SIGKILL);
  EXPECT_EQ(peers[3]->Wait(10000), 128 + SIGKILL);
  peers[3] = start_peer(3, "p3_restarted.log");
  std::vector<double> peer_accuracy;
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(peers[static_cast<size_t>(i)]->Wait(240000), 0) << peers[static_cast<size_t>(i)]->Log();
    std::ifstream in(Path("p" + std::to_string(i) + ".json"));
    const nlohmann::json s = nlohmann::json::parse(in);
    EXPECT_EQ(s["rounds_completed"], std::stoi(rounds)) << "peer " << i;
    peer_accuracy.push_back(s["final_test_accuracy"].get<double>());
  }
  {
    std::ifstream in(Path("p3.json"));
    EXPECT_TRUE(nlohmann::json::parse(in)["resumed"].get<bool>()) << "the restarted peer continued from its --db";
  }

  // The same model by FedAvg through a server, on the same four partitions.
  const std::string address = "127.0.0.1:" + std::to_string(FreePort());
  ChildProcess server(PLEXUS_BINARY,
                      {"server",
                       "--listen",
                       address,
                       "--db",
                       Path("server.db"),
                       "--model",
                       model_,
                       "--rounds",
                       rounds,
                       "--clients-per-round",
                       std::to_string(n),
                       "--min-clients",
                       std::to_string(n),
                       "--lr",
                       "0.05",
                       "--data",
                       Path("holdout.csv"),
                       "--linger-s",
                       "1",
                       "--summary-out",
                       Path("server.json")},
                      Path("server.log"));
  std::vector<std::unique_ptr<ChildProcess>> clients;
  for (int i = 0; i < n; ++i) {
    clients.push_back(std::make_unique<ChildProcess>(
        PLEXUS_BINARY,
        std::vector<std::string>{"client", "--server", address, "--model", model_, "--data", Path("train.csv"),
                                 "--num-partitions", std::to_string(n), "--partition-index", std::to_string(i)},
        Path("c" + std::to_string(i) + ".log")));
  }
  ASSERT_EQ(server.Wait(240000), 0) << server.Log();
  for (auto& c : clients) c->Wait(60000);
  std::ifstream in(Path("server.json"));
  const double fedavg = nlohmann::json::parse(in)["final_test_accuracy"].get<double>();
  for (int i = 0; i < n; ++i) {
    EXPECT_NEAR(peer_accuracy[static_cast<size_t>(i)], fedavg, 0.02) << "peer " << i;
  }

  // Peer 0's model back to PyTorch scores what the peer reported, on the same file.
  std::string out;
  ASSERT_EQ(RunToCompletion(
                PLEXUS_BINARY,
                {"export", "--db", Path("p0.db"), "--format", "torchscript", "--model", model_, "--out", Path("p0.pt")},
                &out),
            0)
      << out;
  std::string scored;
  ASSERT_EQ(RunToCompletion(kPython, {kScript, "evaluate", Path("p0.pt"), Path("holdout.csv")}, &scored), 0) << scored;
  const nlohmann::json pytorch = nlohmann::json::parse(scored.substr(scored.find('{')));
  EXPECT_NEAR(pytorch["accuracy"].get<double>(), peer_accuracy[0], 0.001) << scored;
  std::printf("peers %.4f %.4f %.4f %.4f, FedAvg through a server %.4f, peer 0 in PyTorch %.4f\n", peer_accuracy[0],
              peer_accuracy[1], peer_accuracy[2], peer_accuracy[3], fedavg, pytorch["accuracy"].get<double>());
}

TEST_F(OwnModelTest, ARegressionTrainsOnMeanSquaredErrorAndReportsRSquared) {
  std::string out;
  const std::vector<std::string> args{"sim",
                                      "--model",
                                      Path("regressor.pt"),
                                      "--data",
                                      Path("regression.csv"),
                                      "--label-column",
                                      "target",
                                      "--loss",
                                      "mse",
                                      "--clients",
                                      "4",
                                      "--clients-per-round",
                                      "4",
                                      "--rounds",
                                      "6",
                                      "--lr",
                                      "0.02",
                                      "--seed",
                                      "1"};
  ASSERT_EQ(RunToCompletion(PLEXUS_BINARY, args, &out), 0) << out;
  const size_t at = out.find("final test accuracy ");
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_GT(std::stod(out.substr(at + 20)), 0.9) << "R^2 of a noisy linear target\n" << out;
  // A model with four outputs for one target, and mse for a built-in model, are refused.
  EXPECT_NE(RunToCompletion(PLEXUS_BINARY,
                            {"sim", "--model", model_, "--data", Path("regression.csv"), "--label-column", "target",
                             "--loss", "mse", "--rounds", "1"},
                            &out),
            0);
  EXPECT_NE(out.find("target(s) per example"), std::string::npos) << out;
  EXPECT_NE(RunToCompletion(PLEXUS_BINARY, {"sim", "--model", "mlp", "--loss", "mse"}, &out), 0);
  EXPECT_NE(out.find("needs a TorchScript model"), std::string::npos) << out;
}

// docs/models-and-data.md rebuilds the built-in models as PyTorch modules: its code block, given
// an export of each, scores on the test images what the simulator reported for it.
TEST_F(OwnModelTest, TheBuiltInModelsAsDocumentedScoreInPyTorchWhatTheSimulatorReported) {
  const std::string data_dir = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(data_dir)) GTEST_SKIP() << "dataset not installed";
  const std::string doc = std::string(PLEXUS_SOURCE_DIR) + "/docs/models-and-data.md";
  constexpr int kTestImages = 500;
  for (const std::string model : {"mlp", "cnn"}) {
    SCOPED_TRACE(model);
    std::string out;
    ASSERT_EQ(RunToCompletion(PLEXUS_BINARY,
                              {"sim", "--model", model, "--clients", "2", "--clients-per-round", "2", "--rounds", "1",
                               "--local-steps", "10", "--test-subset", std::to_string(kTestImages), "--model-out",
                               Path(model + ".safetensors"), "--summary-out", Path(model + ".json")},
                              &out),
              0)
        << out;
    const double reported = ReadJson(Path(model + ".json"))["final_test_accuracy"].get<double>();
    ASSERT_EQ(RunToCompletion(
                  kPython,
                  {kScript, "builtin", doc, model, Path(model + ".safetensors"), data_dir, std::to_string(kTestImages)},
                  &out),
              0)
        << out;
    const double in_pytorch = nlohmann::json::parse(out.substr(out.find('{')))["accuracy"].get<double>();
    EXPECT_GT(reported, 0.2);  // trained: above chance (0.1)
    // The same weights and images; float rounding may flip an argmax between two close logits.
    EXPECT_NEAR(in_pytorch, reported, 2.0 / kTestImages);
  }
}

// The PyTorch class docs/models-and-data.md gives for tinylm, loaded with a trained export, scores
// on the corpus's validation windows (cut in Python as the docs say) what the simulator reported.
TEST_F(OwnModelTest, TheDocumentedLanguageModelScoresInPyTorchWhatTheSimulatorReported) {
  const std::string corpus = "/usr/share/games/fortunes";
  if (!std::filesystem::exists(corpus)) GTEST_SKIP() << "fortunes not installed";
  const std::string doc = std::string(PLEXUS_SOURCE_DIR) + "/docs/models-and-data.md";
  constexpr int kWindows = 100;
  std::string out;
  ASSERT_EQ(RunToCompletion(PLEXUS_BINARY,
                            {"sim",
                             "--model",
                             "tinylm",
                             "--clients",
                             "2",
                             "--clients-per-round",
                             "2",
                             "--rounds",
                             "1",
                             "--local-steps",
                             "5",
                             "--batch-size",
                             "8",
                             "--optimizer",
                             "adamw",
                             "--lr",
                             "0.003",
                             "--test-subset",
                             std::to_string(kWindows),
                             "--model-out",
                             Path("tinylm.safetensors"),
                             "--summary-out",
                             Path("tinylm.json")},
                            &out),
            0)
      << out;
  const nlohmann::json summary = ReadJson(Path("tinylm.json"));
  const double reported = summary["final_test_bits_per_char"].get<double>();
  ASSERT_EQ(
      RunToCompletion(kPython,
                      {kScript, "builtin", doc, "tinylm", Path("tinylm.safetensors"), corpus, std::to_string(kWindows)},
                      &out),
      0)
      << out;
  const double in_pytorch = nlohmann::json::parse(out.substr(out.find('{')))["bits_per_char"].get<double>();
  EXPECT_LT(reported, 8.0);  // trained a little: below a uniform guess over 256 bytes
  EXPECT_NEAR(in_pytorch, reported, 1e-3);
}

// The same class as a user's TorchScript file, trained as a language model (--loss next_byte) on
// the corpus; --loss next_byte is refused for the built-in model, which needs no such flag.
TEST_F(OwnModelTest, TheDocumentedLanguageModelAsTorchScriptTrainsOnTheCorpus) {
  if (!std::filesystem::exists("/usr/share/games/fortunes/fortunes")) GTEST_SKIP() << "fortunes not installed";
  const std::string doc = std::string(PLEXUS_SOURCE_DIR) + "/docs/models-and-data.md";
  std::string out;
  ASSERT_EQ(RunToCompletion(kPython, {kScript, "script-lm", doc, Path("lm.pt")}, &out), 0) << out;
  ASSERT_EQ(RunToCompletion(PLEXUS_BINARY,
                            {"sim",
                             "--model",
                             Path("lm.pt"),
                             "--loss",
                             "next_byte",
                             "--clients",
                             "2",
                             "--clients-per-round",
                             "2",
                             "--rounds",
                             "3",
                             "--local-steps",
                             "10",
                             "--batch-size",
                             "8",
                             "--optimizer",
                             "adamw",
                             "--lr",
                             "0.003",
                             "--test-subset",
                             "50",
                             "--summary-out",
                             Path("lm.json")},
                            &out),
            0)
      << out;
  const nlohmann::json summary = ReadJson(Path("lm.json"));
  ASSERT_TRUE(summary["final_test_bits_per_char"].is_number()) << summary;
  EXPECT_LT(summary["final_test_bits_per_char"].get<double>(), 8.0);  // below a uniform guess over 256 bytes
  EXPECT_TRUE(summary["unigram_bits_per_char"].is_number()) << summary;
  EXPECT_NE(RunToCompletion(PLEXUS_BINARY, {"sim", "--model", "tinylm", "--loss", "next_byte", "--dry-run"}, &out), 0);
  EXPECT_NE(out.find("predicts the next byte without it"), std::string::npos) << out;
}

}  // namespace
}  // namespace plexus
