// The Python package (python/, docs/python.md) end to end, with real processes on 127.0.0.1: a
// `plexus server`, Python clients that federate their own training loop (python_client.py:
// AdamW, a schedule, augmentation) through plexus.Client, and the C++ `plexus client`.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/file_contents.h"
#include "core/safetensors.h"
#include "tests/integration/process.h"

namespace plexus {
namespace {

using ::plexus::testing::ChildProcess;
using ::plexus::testing::FreePort;
using ::plexus::testing::RunToCompletion;

constexpr const char* kPython = "/usr/bin/python3";  // Debian's, with python3-torch
const std::string kClient = std::string(PLEXUS_SOURCE_DIR) + "/tests/integration/python_client.py";
const std::string kPackageChecks = std::string(PLEXUS_SOURCE_DIR) + "/tests/integration/python_package.py";
constexpr int kRounds = 3;

class PythonClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The package as the build lays it out; the child processes inherit the path.
    setenv("PYTHONPATH", PLEXUS_PYTHON_PACKAGE_DIR, 1);
    std::string out;
    ASSERT_EQ(RunToCompletion(kPython, {"-c", "import torch, plexus"}, &out), 0)
        << "the plexus package or Debian's python3-torch cannot be imported: " << out;
    dir_ = std::filesystem::temp_directory_path() / ("plexus_python_" + std::to_string(::getpid()) + "_" +
                                                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    address_ = "127.0.0.1:" + std::to_string(FreePort());
  }
  void TearDown() override {
    if (HasFailure()) testing::PrintLogs(dir_.string(), 4000);
    std::filesystem::remove_all(dir_);
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // Sync FedAvg of the built-in MLP for `clients` clients, kRounds rounds of 50 steps.
  std::unique_ptr<ChildProcess> StartServer(const std::string& name, int clients = 3,
                                            const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args{"server",
                                  "--listen",
                                  address_,
                                  "--db",
                                  Path(name + ".db"),
                                  "--rounds",
                                  std::to_string(kRounds),
                                  "--clients-per-round",
                                  std::to_string(clients),
                                  "--min-clients",
                                  std::to_string(clients),
                                  "--model",
                                  "mlp",
                                  "--local-steps",
                                  "50",
                                  "--test-subset",
                                  "2000",
                                  "--summary-out",
                                  Path(name + ".json"),
                                  "--round-deadline-s",
                                  "120"};
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<ChildProcess>(PLEXUS_BINARY, args, Path(name + "-server.log"));
  }
  std::unique_ptr<ChildProcess> StartCppClient(int partition, const std::string& log) {
    return std::make_unique<ChildProcess>(
        PLEXUS_BINARY,
        std::vector<std::string>{"client", "--server", address_, "--partition", "iid", "--num-partitions", "3",
                                 "--partition-index", std::to_string(partition), "--give-up-s", "120"},
        Path(log));
  }
  std::unique_ptr<ChildProcess> StartPythonClient(int partition, const std::vector<std::string>& extra,
                                                  const std::string& log) {
    std::vector<std::string> args{kClient, address_, std::to_string(partition), "3"};
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<ChildProcess>(kPython, args, Path(log));
  }
  // A JSON file (discarded, not an object, when it is missing or malformed).
  static nlohmann::json Json(const std::string& path) {
    Result<std::string> text = ReadFileContents(path);
    return nlohmann::json::parse(text.ok() ? *text : std::string(), nullptr, false);
  }
  // The client summary a python_client.py printed on its last line.
  static nlohmann::json LastLine(const std::string& log) {
    std::string text = log;
    while (!text.empty() && text.back() == '\n') text.pop_back();
    return nlohmann::json::parse(text.substr(text.rfind('\n') + 1), nullptr, false);
  }

  std::filesystem::path dir_;
  std::string address_;
};

// Two clients running their own PyTorch loop and one C++ client reach at least the accuracy of
// three C++ clients with the same server settings.
TEST_F(PythonClientTest, TwoPythonLoopsAndACppClientReachTheCppOnlyAccuracy) {
  double cpp_only = 0;
  {
    auto server = StartServer("cpp");
    std::vector<std::unique_ptr<ChildProcess>> clients;
    for (int i = 0; i < 3; ++i) clients.push_back(StartCppClient(i, "cpp-client" + std::to_string(i) + ".log"));
    for (auto& c : clients) ASSERT_EQ(c->Wait(240000), 0) << c->Log();
    ASSERT_EQ(server->Wait(120000), 0) << server->Log();
    cpp_only = Json(Path("cpp.json"))["final_test_accuracy"].get<double>();
  }
  address_ = "127.0.0.1:" + std::to_string(FreePort());
  auto server = StartServer("mixed");
  auto py0 = StartPythonClient(0, {}, "py0.log");
  auto py1 = StartPythonClient(1, {}, "py1.log");
  auto cpp = StartCppClient(2, "mixed-cpp.log");
  for (ChildProcess* c : {py0.get(), py1.get(), cpp.get()}) ASSERT_EQ(c->Wait(240000), 0) << c->Log();
  ASSERT_EQ(server->Wait(120000), 0) << server->Log();
  for (ChildProcess* c : {py0.get(), py1.get()}) {
    const nlohmann::json s = LastLine(c->Log());
    ASSERT_TRUE(s.is_object()) << c->Log();
    EXPECT_EQ(s["tasks_completed"], kRounds) << c->Log();
    EXPECT_EQ(s["tasks_failed"], 0) << c->Log();
    // The binding's own time is measured apart from the loop's (bench/run_python_binding.sh).
    EXPECT_EQ(s["tasks_timed"], kRounds) << c->Log();
    EXPECT_GT(s["train_s"].get<double>(), 0) << c->Log();
    EXPECT_GT(s["binding_s"].get<double>(), 0) << c->Log();
  }
  const nlohmann::json mixed = Json(Path("mixed.json"));
  ASSERT_TRUE(mixed.is_object());
  EXPECT_EQ(mixed["model_version"], kRounds);
  const double with_python = mixed["final_test_accuracy"].get<double>();
  RecordProperty("cpp_only_accuracy", std::to_string(cpp_only));
  RecordProperty("with_python_accuracy", std::to_string(with_python));
  EXPECT_GE(with_python, cpp_only) << "C++ only: " << cpp_only;
}

// A user loop that raises, returns NaN weights, or changes a tensor's shape has that task refused
// with the reason, and the client goes on and completes the federation's rounds.
TEST_F(PythonClientTest, AFailingUserLoopIsRefusedForThatTaskAndTheClientGoesOn) {
  auto server = StartServer("failing");
  const std::vector<std::pair<std::string, std::string>> failures = {
      {"raise", "the training function raised ValueError: this user loop fails its first task on purpose"},
      {"nan", "tensor fc1.weight came back holding NaN or infinite values"},
      {"shape", "tensor fc2.bias came back with shape (11,) where the model has (10,)"}};
  std::vector<std::unique_ptr<ChildProcess>> clients;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(StartPythonClient(i, {"--fail", failures[i].first}, "py" + std::to_string(i) + ".log"));
  }
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(clients[i]->Wait(240000), 0) << clients[i]->Log();
    const std::string log = clients[i]->Log();
    EXPECT_NE(log.find("dropped: ABORTED: " + failures[i].second), std::string::npos) << log;
    const nlohmann::json s = LastLine(log);
    ASSERT_TRUE(s.is_object()) << log;
    EXPECT_EQ(s["tasks_failed"], 1) << log;
    EXPECT_EQ(s["tasks_completed"], kRounds) << log;
  }
  ASSERT_EQ(server->Wait(120000), 0) << server->Log();
  EXPECT_EQ(Json(Path("failing.json"))["model_version"], kRounds);
}

// A model of another layout is refused when the client joins, in one line, before any task.
TEST_F(PythonClientTest, AModelOfAnotherLayoutIsRefusedAtJoin) {
  auto server = StartServer("layout");
  auto wider = StartPythonClient(0, {"--wider"}, "wider.log");
  EXPECT_NE(wider->Wait(120000), 0);
  EXPECT_NE(wider->Log().find("the model's tensor 0 is fc1.weight(256, 784) where the server's mlp has "
                              "fc1.weight(200, 784)"),
            std::string::npos)
      << wider->Log();
  server->Signal(SIGTERM);
  server->Wait(60000);
}

// A Python client takes part over mutual TLS, with certificates from `plexus certs`.
TEST_F(PythonClientTest, APythonClientTakesPartOverMutualTls) {
  const std::string certs = Path("certs");
  for (const std::vector<std::string>& args : {std::vector<std::string>{"certs", "init", "--dir", certs},
                                               {"certs", "issue", "--dir", certs, "--server", "localhost"},
                                               {"certs", "issue", "--dir", certs, "--client", "alice"}}) {
    std::string out;
    ASSERT_EQ(RunToCompletion(PLEXUS_BINARY, args, &out), 0) << out;
  }
  auto server = StartServer(
      "tls", 1,
      {"--tls-cert", certs + "/localhost.crt", "--tls-key", certs + "/localhost.key", "--tls-ca", certs + "/ca.crt"});
  address_ = "localhost:" + address_.substr(address_.rfind(':') + 1);  // the name the certificate holds
  auto client = StartPythonClient(0, {"--tls-dir", certs, "--tls-name", "alice"}, "tls-client.log");
  ASSERT_EQ(client->Wait(240000), 0) << client->Log();
  ASSERT_EQ(server->Wait(120000), 0) << server->Log();
  const nlohmann::json s = LastLine(client->Log());
  ASSERT_TRUE(s.is_object()) << client->Log();
  EXPECT_EQ(s["tasks_completed"], kRounds) << client->Log();
  EXPECT_NE(server->Log().find("alice"), std::string::npos) << server->Log();  // the identity its certificate names
}

// The server's federated evaluation tasks reach the user's evaluate function: its examples, loss
// and accuracy come back in the server's summary.
TEST_F(PythonClientTest, FederatedEvaluationCallsTheUsersEvaluateFunction) {
  auto server = StartServer("eval", 1, {"--federated-eval-every", "1", "--federated-eval-fraction", "1"});
  auto client = StartPythonClient(0, {"--evaluate"}, "eval-client.log");
  ASSERT_EQ(client->Wait(240000), 0) << client->Log();
  ASSERT_EQ(server->Wait(120000), 0) << server->Log();
  const nlohmann::json s = LastLine(client->Log());
  ASSERT_TRUE(s.is_object()) << client->Log();
  EXPECT_GE(s["evaluations"].get<int>(), 1) << client->Log();
  const nlohmann::json summary = Json(Path("eval.json"));
  ASSERT_TRUE(summary["federated_test_accuracy"].is_number()) << summary.dump(2);
  EXPECT_GT(summary["federated_test_accuracy"].get<double>(), 0.5);  // chance is 0.1
}

// Client(local_dp=(C, Z)) clips and noises every update before it leaves, as `plexus client --dp
// local:...` does (the server, running the same local DP, admits it at join): the copies it keeps
// (save_updates_dir) have norm C within the noise; its summary counts the noised releases and their
// epsilon. A device policy that first says no holds the client back, then lets it work. The
// server's --task-config reaches the loop as task.config.
TEST_F(PythonClientTest, APythonClientRunsLocalDpAndItsDevicePolicy) {
  auto server = StartServer(
      "ldp", 1, {"--dp", "local:clip=0.5,noise=0.0001", "--task-config", "noise=0.05", "--task-config", "note=a=b"});
  auto py = StartPythonClient(
      0, {"--local-dp", "0.5,0.0001", "--save-updates", Path("updates"), "--blocked-checks", "3"}, "ldp-py.log");
  ASSERT_EQ(py->Wait(240000), 0) << py->Log();
  ASSERT_EQ(server->Wait(120000), 0) << server->Log();
  const nlohmann::json s = LastLine(py->Log());
  ASSERT_TRUE(s.is_object()) << py->Log();
  EXPECT_EQ(s["tasks_completed"], kRounds);
  EXPECT_EQ(s["local_dp_releases"], kRounds);
  EXPECT_GT(s["local_dp_epsilon"].get<double>(), 0);
  EXPECT_GE(s["device_checks"].get<int>(), 4);
  // The server's --task-config reached the loop as given (the loop reads its noise from it).
  EXPECT_EQ(s["configs"], nlohmann::json::parse(R"([{"noise": "0.05", "note": "a=b"}])"));
  EXPECT_NE(py->Log().find("taking no new task: not charging (test)"), std::string::npos) << py->Log();
  int copies = 0;
  for (const auto& entry : std::filesystem::directory_iterator(Path("updates"))) {
    Result<ModelState> delta = ReadSafetensorsFile(entry.path().string());
    ASSERT_TRUE(delta.ok()) << delta.status().ToString();
    double sum = 0;
    for (float v : delta->data()) sum += static_cast<double>(v) * v;
    // Clipped to 0.5; the noise (0.5e-4 per value, 159,010 values) adds about 0.02.
    EXPECT_NEAR(std::sqrt(sum), 0.5, 0.05) << entry.path();
    ++copies;
  }
  EXPECT_EQ(copies, kRounds);
}

// Python clients take part in secure aggregation as the C++ client does: the server sees only the
// masked sum, and every round publishes.
TEST_F(PythonClientTest, PythonClientsTakePartInSecureAggregation) {
  auto server = StartServer("secagg", 3, {"--secagg"});
  auto py0 = StartPythonClient(0, {}, "secagg-py0.log");
  auto py1 = StartPythonClient(1, {}, "secagg-py1.log");
  auto cpp = StartCppClient(2, "secagg-cpp.log");
  for (ChildProcess* c : {py0.get(), py1.get(), cpp.get()}) ASSERT_EQ(c->Wait(240000), 0) << c->Log();
  ASSERT_EQ(server->Wait(120000), 0) << server->Log();
  for (ChildProcess* c : {py0.get(), py1.get()}) EXPECT_EQ(LastLine(c->Log())["tasks_completed"], kRounds) << c->Log();
  const nlohmann::json summary = Json(Path("secagg.json"));
  ASSERT_TRUE(summary.is_object());
  EXPECT_EQ(summary["model_version"], kRounds);
  EXPECT_NE(summary["strategy"].get<std::string>().find("over secure aggregation"), std::string::npos)
      << summary.dump();
  EXPECT_EQ(summary["transfers"]["upload_bytes_received"], 0);  // no update reached it in the clear
  EXPECT_GT(summary["final_test_accuracy"].get<double>(), 0.7);
}

// plexus.sim returns what `plexus sim` with the same settings writes (the same model, to the
// bit), and a failing setting raises with the program's message.
TEST_F(PythonClientTest, TheSimulatorComesBackAsPythonObjects) {
  std::string out, cli;
  ASSERT_EQ(RunToCompletion(kPython, {kPackageChecks, "sim"}, &out), 0) << out;
  const nlohmann::json py = LastLine(out);
  ASSERT_TRUE(py.is_object()) << out;
  ASSERT_EQ(RunToCompletion(PLEXUS_BINARY,
                            {"sim", "--rounds", "2", "--clients", "4", "--clients-per-round", "2", "--seed", "7",
                             "--summary-out", Path("cli.json")},
                            &cli),
            0)
      << cli;
  const nlohmann::json direct = Json(Path("cli.json"));
  EXPECT_EQ(py["summary"]["final_model_sha256"], direct["final_model_sha256"]);
  EXPECT_EQ(py["summary"]["final_test_accuracy"], direct["final_test_accuracy"]);
  ASSERT_EQ(py["rounds"].size(), 2u);
  EXPECT_EQ(py["rounds"][1]["test_accuracy"], direct["final_test_accuracy"]);
  EXPECT_EQ(py["rounds"][0]["round"], 1);
  EXPECT_EQ(py["csv_lines"], 3);  // the header and two rounds
  EXPECT_NE(py["bad"].get<std::string>().find("unknown partition 'nonsense'"), std::string::npos) << out;
}

// The loop the Python clients run trains plexus.sim's virtual clients (its own examples named by
// the task): the run repeats to the bit, reaches at least the simulator's own trainer's accuracy
// with the same settings, a module of another layout is refused before training with the
// layout's one line, an exception in the loop reaches the caller as raised, and the NumPy form
// (here a loop that changes nothing) runs every task.
TEST_F(PythonClientTest, TheUsersLoopTrainsTheSimulatorsClients) {
  std::string out, cli;
  ASSERT_EQ(RunToCompletion(kPython, {kClient, "sim", "0", "1"}, &out), 0) << out;
  const nlohmann::json py = LastLine(out);
  ASSERT_TRUE(py.is_object()) << out;
  const nlohmann::json& run = py["runs"][0];
  EXPECT_EQ(run["tasks_trained"], 9);
  EXPECT_EQ(run["rounds_completed"], 3);
  EXPECT_EQ(py["runs"][1]["final_model_sha256"], run["final_model_sha256"]);
  ASSERT_EQ(RunToCompletion(PLEXUS_BINARY,
                            {"sim", "--rounds", "3", "--clients", "3", "--clients-per-round", "3", "--local-steps",
                             "50", "--seed", "1", "--summary-out", Path("native.json")},
                            &cli),
            0)
      << cli;
  const nlohmann::json native = Json(Path("native.json"));
  std::printf("plexus.sim with the user's loop: accuracy %.4f; the simulator's own trainer: %.4f\n",
              run["final_test_accuracy"].get<double>(), native["final_test_accuracy"].get<double>());
  EXPECT_GE(run["final_test_accuracy"].get<double>(), native["final_test_accuracy"].get<double>());
  EXPECT_EQ(py["refused"]["wider"],
            "the module's tensor 0 is fc1.weight(256, 784) where the simulated mlp has "
            "fc1.weight(200, 784)");
  EXPECT_EQ(py["refused"]["raised"], "this user loop fails in the simulator on purpose");
  EXPECT_EQ(py["numpy_form"]["tasks_trained"], 9);
  EXPECT_LT(py["numpy_form"]["final_test_accuracy"].get<double>(), 0.2);  // untrained: chance is 0.1
  // plexus.sim(task_config=...) reaches the loop as the server's --task-config does.
  EXPECT_EQ(py["configs"], nlohmann::json::parse(R"([{"noise": "0.05", "note": "a=b"}])"));
}

// plexus.open_db reads a server's database: its versions, rounds and models.
TEST_F(PythonClientTest, AServersDatabaseComesBackAsPythonObjects) {
  auto server = StartServer("db");
  std::vector<std::unique_ptr<ChildProcess>> clients;
  for (int i = 0; i < 3; ++i) clients.push_back(StartCppClient(i, "db-client" + std::to_string(i) + ".log"));
  for (auto& c : clients) ASSERT_EQ(c->Wait(240000), 0) << c->Log();
  ASSERT_EQ(server->Wait(120000), 0) << server->Log();
  std::string out;
  ASSERT_EQ(RunToCompletion(kPython, {kPackageChecks, "db", Path("db.db")}, &out), 0) << out;
  const nlohmann::json py = LastLine(out);
  ASSERT_TRUE(py.is_object()) << out;
  const nlohmann::json summary = Json(Path("db.json"));
  EXPECT_EQ(py["model_name"], "mlp");
  EXPECT_EQ(py["versions"].back(), kRounds);
  ASSERT_EQ(py["rounds"].size(), static_cast<size_t>(kRounds));
  for (int r = 0; r < kRounds; ++r) {
    EXPECT_EQ(py["rounds"][r]["round"], r + 1);
    EXPECT_EQ(py["rounds"][r]["updates"], 3);
    EXPECT_EQ(py["rounds"][r]["test_accuracy"], summary["rounds"][r]["test_accuracy"]);
  }
  EXPECT_EQ(py["tensors"]["fc1.weight"], nlohmann::json::array({200, 784}));
  EXPECT_TRUE(py["state_dict_matches"].get<bool>());
  // The values are the ones `plexus export` writes for the latest version.
  std::string exported;
  ASSERT_EQ(
      RunToCompletion(PLEXUS_BINARY, {"export", "--db", Path("db.db"), "--out", Path("m.safetensors")}, &exported), 0)
      << exported;
  std::string check;
  ASSERT_EQ(RunToCompletion(kPython,
                            {"-c",
                             "import hashlib, json, struct, sys\n"
                             "b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]\n"
                             "h = json.loads(b[8:8 + n]); h.pop('__metadata__', None)\n"
                             "data = b[8 + n:]\n"
                             "print(hashlib.sha256(b''.join(data[v['data_offsets'][0]:v['data_offsets'][1]] for v in "
                             "sorted(h.values(), key=lambda v: v['data_offsets'][0]))).hexdigest())",
                             Path("m.safetensors")},
                            &check),
            0)
      << check;
  EXPECT_NE(check.find(py["values_sha256"].get<std::string>()), std::string::npos) << check;
}

}  // namespace
}  // namespace plexus
