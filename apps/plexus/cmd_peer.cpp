// `plexus peer`: one node of a decentralized federation with no server (gossip/node/peer_node.h),
// training on its partition of Fashion-MNIST or of a user's data file (--data) with a built-in
// model or a user's TorchScript model (--model PATH.pt), and gossiping with the peers it finds
// through --peers. Writes a summary JSON at the end, with its own model's accuracy on its test
// examples (Fashion-MNIST's test set, or its held-out share of --data).
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <numeric>
#include <sstream>

#include "aggregators/strategy_spec.h"
#include "apps/plexus/commands.h"
#include "apps/plexus/help_lists.h"
#include "apps/plexus/model_choice.h"
#include "apps/plexus/run_summary.h"
#include "apps/plexus/slow_link_checks.h"
#include "client/grpc_transport.h"
#include "client/server_exchange.h"
#include "compute/fashion_mnist.h"
#include "compute/model_zoo.h"
#include "compute/partition.h"
#include "compute/portable_trainer.h"
#include "compute/text_corpus.h"
#include "compute/trainer.h"
#include "core/atomic_file.h"
#include "core/host_port.h"
#include "gossip/node/peer_node.h"
#include "gossip/protocol/neighbour_merge.h"
#include "gossip/protocol/registry.h"
#include "gossip/protocol/topology.h"

namespace plexus::cli {
namespace {

struct PeerFlags {
  std::string listen = "127.0.0.1:7070";
  std::string advertise;
  std::string peers;
  std::string gossip = "el:s=2";
  std::string merge = "mean";
  std::string topology;
  uint64_t rounds = 20;
  std::string model = "mlp";
  std::string loss = "cross_entropy";
  bool local_buffers = false;
  std::string data_dir = kDefaultFashionMnistDir;
  DataFlags data;
  double test_split = 0.1;  // with --data: the share of the partition held out as the test examples
  std::string test_data;    // with --data: a file of test examples instead (read like --data)
  std::string partition = "iid";
  int64_t num_partitions = 1;
  int64_t partition_index = 0;
  uint64_t seed = 0;
  TaskHyperparams task;
  std::string db;
  std::string summary_out;
  std::string tls_ca, tls_cert, tls_key;
  bool insecure = false;
  std::string server;  // semi-decentralized: the plexus server
  int threads = 1;
  int64_t test_subset = 0;
  double linger_s = 2;
  double give_up_s = 300;
  double model_stall_s = 30;
  uint64_t inbound_budget_mb = 256;
  double start_wait_s = 10;
  uint64_t eval_every = 5;
  std::string attack = "none";
  std::string trainer = "torch";
};

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// Local training on the peer's partition, on libuv's worker thread.
// Local training on the peer's partition and evaluation on the test examples, on libuv's worker
// threads: one Trainer each, since the two may run at once.
class PartitionTrainer final : public gossip::PeerTrainer {
 public:
  PartitionTrainer(std::unique_ptr<Trainer> trainer, std::unique_ptr<Trainer> evaluator, DatasetView data,
                   DatasetView test, TaskHyperparams task, uint64_t seed)
      : trainer_(std::move(trainer)),
        evaluator_(std::move(evaluator)),
        data_(std::move(data)),
        test_(std::move(test)),
        task_(task),
        seed_(seed) {}
  Result<ModelState> Train(const ModelState& start, uint64_t round) override {
    TrainOptions options = TrainOptionsFor(task_, seed_ * 1000003 + round);
    options.optimizer_state = &optimizer_state_;  // one training at a time: the node trains in turn
    PLEXUS_ASSIGN_OR_RETURN(TrainOutcome out, trainer_->Train(start, data_, options));
    if (attack_factor_ != 1.0) {
      // Test-only attacker: what it trained becomes start + factor * (trained - start), and that
      // is the model it sends (and keeps).
      std::span<float> w = out.weights.data();
      std::span<const float> s = start.data();
      const auto f = static_cast<float>(attack_factor_);
      for (size_t i = 0; i < w.size(); ++i) w[i] = s[i] + f * (w[i] - s[i]);
    }
    return std::move(out.weights);
  }
  void set_attack_factor(double f) { attack_factor_ = f; }
  Result<double> Evaluate(const ModelState& model) override {
    PLEXUS_ASSIGN_OR_RETURN(Evaluation e, evaluator_->Evaluate(model, test_));
    return e.accuracy;
  }
  Result<Evaluation> EvaluateFully(const ModelState& model) { return evaluator_->Evaluate(model, test_); }

 private:
  std::unique_ptr<Trainer> trainer_, evaluator_;
  DatasetView data_, test_;
  TaskHyperparams task_;
  uint64_t seed_;
  double attack_factor_ = 1.0;
  // AdamW's moments from round to round (--optimizer adamw), in memory: a restarted peer starts
  // them afresh.
  OptimizerState optimizer_state_;
};

// --attack (tests and demonstrations only): signflip[:scale=S] sends -S times the update it
// trained (S = 1 by default), scale:f=F sends F times it. Returns the factor on the update.
double ParseAttack(const std::string& text) {
  if (text.empty() || text == "none") return 1.0;
  StrategySpec spec = Take(StrategySpec::Parse(text), "--attack");
  double factor = 1.0;
  if (spec.name() == "signflip") {
    factor = -Take(spec.GetDouble("scale", 1.0), "--attack");
  } else if (spec.name() == "scale") {
    factor = Take(spec.GetDouble("f", 10.0), "--attack");
  } else {
    throw CommandError("--attack: unknown attack '" + spec.name() + "' (none, signflip[:scale=S] or scale:f=F)");
  }
  Check(spec.CheckAllUsed(), "--attack");
  return factor;
}

// The peer node's view of the server: ServerExchange (client/) behind gossip's ServerLink.
class ExchangeLink final : public gossip::ServerLink {
 public:
  explicit ExchangeLink(ServerExchange* exchange) : exchange_(exchange) {}
  Result<ModelState> Exchange(const ModelState& model, uint64_t) override { return exchange_->Exchange(model); }
  void Cancel() override { exchange_->Cancel(); }

 private:
  ServerExchange* exchange_;
};

void RunPeer(const PeerFlags& f) {
  InstallStopHandlers();
  if (f.partition_index < 0 || f.partition_index >= f.num_partitions) {
    throw CommandError("--partition-index must lie in [0, " + std::to_string(f.num_partitions) + ")");
  }
  if (f.num_partitions < 2) throw CommandError("--num-partitions is the number of peers: at least 2");
  Check(gossip::CheckPeerAddress(f.listen, "--listen"));
  if (!f.advertise.empty()) Check(gossip::CheckPeerAddress(f.advertise, "--advertise"));
  const std::vector<std::string> seeds = SplitList(f.peers);
  for (const std::string& s : seeds) Check(gossip::CheckPeerAddress(s, "--peers"));
  auto factory = Take(gossip::MakeGossip(f.gossip, f.merge));
  if (factory->needs_server() && f.server.empty()) {
    throw CommandError("--gossip " + f.gossip +
                       " needs --server HOST:PORT: a plexus server in async mode with --buffer-size K (the sample "
                       "size) and --server-lr 1 (docs/gossip.md)");
  }
  if (!factory->needs_server() && !f.server.empty()) {
    throw CommandError("--server is for --gossip semidecentralized:...; " + f.gossip + " has no server");
  }
  if (factory->needs_server() && factory->description().find("mode=s2a") != std::string::npos) {
    throw CommandError("--gossip " + f.gossip +
                       ": between real peers the server's average goes to the sampled peers only (mode=s2s); "
                       "mode=s2a runs in plexus sim --mode gossip");
  }

  CheckGossipLocalSteps(*factory, f.gossip, f.task);

  gossip::PeerNodeOptions o;
  o.self = static_cast<gossip::NodeId>(f.partition_index);
  o.nodes = static_cast<size_t>(f.num_partitions);
  o.listen = f.listen;
  o.advertise = f.advertise;
  o.seeds = seeds;
  o.rounds = f.rounds;
  o.seed = f.seed;
  o.topology = f.topology;
  o.linger_ms = f.linger_s * 1000;
  o.give_up_ms = f.give_up_s * 1000;
  o.inbound_stall_ms = f.model_stall_s * 1000;
  o.inbound_budget = f.inbound_budget_mb << 20;
  o.start_wait_ms = f.start_wait_s * 1000;
  o.eval_every = f.eval_every;
  if (factory->description().rfind("choco", 0) == 0) {
    // Compressed gossip: the changes travel in the codec's bytes; peers accept only this codec.
    StrategySpec spec = Take(StrategySpec::Parse(f.gossip), "--gossip");
    o.codec = Take(spec.GetString("codec", "int8"), "--gossip");
  }
  // The model by its layout (a TorchScript file by its hash, not its path): peers with another
  // model refuse each other's hello, naming both runs.
  const ModelChoice model(f.model, f.loss);
  if (f.local_buffers && !model.is_script()) {
    throw CommandError("--local-buffers keeps a TorchScript model's buffers local: it needs --model PATH.pt");
  }
  o.run = factory->description() + "/" + factory->merge_description() + "/" + model.federation_name() + "/" +
          f.partition + (f.data.given() ? "/data" : "");

  const int tls_flags = !f.tls_ca.empty() + !f.tls_cert.empty() + !f.tls_key.empty();
  if (tls_flags != 0 && tls_flags != 3)
    throw CommandError("mutual TLS needs all of --tls-ca, --tls-cert and --tls-key");
  if (tls_flags == 3) {
    o.tls = Take(gossip::TlsContext::Create(ReadFileForFlag(f.tls_ca, "--tls-ca"),
                                            ReadFileForFlag(f.tls_cert, "--tls-cert"),
                                            ReadFileForFlag(f.tls_key, "--tls-key")));
  } else if (!f.insecure) {
    // Models in plaintext are anyone's who can see the traffic: only on this machine.
    std::vector<std::string> addresses = seeds;
    addresses.push_back(f.listen);
    if (!f.advertise.empty()) addresses.push_back(f.advertise);
    for (const std::string& a : addresses) {
      if (!IsLoopback(a)) {
        throw CommandError("refusing plaintext gossip with " + a +
                           ": give --tls-ca, --tls-cert and --tls-key (plexus certs issue --peer peer-" +
                           std::to_string(f.partition_index) + "), or --insecure");
      }
    }
  }

  const double attack_factor = ParseAttack(f.attack);
  PartitionSpec spec = Take(PartitionSpec::Parse(f.partition), "--partition");
  // A peer keeps only its partition and its test examples: 64 peers on one machine must not hold
  // 64 copies of the whole data set.
  Dataset local_data =
      LoadData(f.data, model.regression(), f.data_dir, Split::kTrain,
               [&](const std::vector<uint8_t>& labels) -> Result<std::vector<uint32_t>> {
                 PLEXUS_ASSIGN_OR_RETURN(auto parts,
                                         PartitionIndices(labels, spec, static_cast<size_t>(f.num_partitions), f.seed));
                 return std::move(parts[static_cast<size_t>(f.partition_index)]);
               });
  Dataset test_data;
  // A test split's first --test-subset examples (all when 0).
  const ExampleSelector first_test_examples = [&](const std::vector<uint8_t>& labels) {
    std::vector<uint32_t> first(f.test_subset > 0 ? std::min<size_t>(labels.size(), f.test_subset) : labels.size());
    std::iota(first.begin(), first.end(), 0u);
    return Result<std::vector<uint32_t>>(std::move(first));
  };
  if (!f.test_data.empty()) {  // a common test file, read as --data is
    if (!f.data.given()) throw CommandError("--test-data is for --data: Fashion-MNIST peers test on its test set");
    DataFlags test_flags = f.data;
    test_flags.data = f.test_data;
    test_data = LoadData(test_flags, model.regression(), f.data_dir, Split::kTrain);
  } else if (f.data.given() && IsTextCorpus(f.data.data)) {  // a text corpus's validation windows
    test_data = LoadData(f.data, model.regression(), f.data_dir, Split::kTest, first_test_examples);
  } else if (f.data.given()) {  // a seeded share of the peer's partition is its test set
    HeldOut split =
        Take(HoldOut(local_data, f.test_split, f.seed ^ static_cast<uint64_t>(f.partition_index + 1)), "--test-split");
    local_data = std::move(split.kept);
    test_data = std::move(split.held_out);
  } else {
    test_data = Take(LoadFashionMnist(f.data_dir, Split::kTest, first_test_examples));
  }
  spdlog::info("peer {}: partition {} of {} ({}): {} examples", f.partition_index, f.partition_index, f.num_partitions,
               spec.ToString(), local_data.size());
  ModelState initial = model.Initial(f.seed);
  Check(factory->CheckModel(initial), "--gossip");
  auto make_trainer = [&](int threads) {
    return Take(model.MakeTrainer(threads, f.trainer == "portable", f.local_buffers), "--model");
  };
  PartitionTrainer trainer(make_trainer(f.threads), make_trainer(1), DatasetView::All(local_data),
                           DatasetView::All(test_data), f.task,
                           f.seed ^ static_cast<uint64_t>(f.partition_index + 1) * 0x9e3779b97f4a7c15ULL);
  if (attack_factor != 1.0) {
    spdlog::warn("peer {} is an attacker (--attack {}): it sends {} times its update", f.partition_index, f.attack,
                 attack_factor);
    trainer.set_attack_factor(attack_factor);
  }

  // Semi-decentralized: the server, reached as a client named after the peer, with the peer's
  // certificate when the peers use TLS.
  std::unique_ptr<ServerExchange> exchange;
  std::unique_ptr<ExchangeLink> server_link;
  if (factory->needs_server()) {
    // HOST:PORT, HOST a name or an address (with TLS, the name the server's certificate carries).
    if (Result<HostPort> parsed = ParseHostPort(f.server); !parsed.ok() || parsed->host.empty()) {
      throw CommandError("--server: " + (parsed.ok() ? "'" + f.server + "' names no host" : parsed.status().message()));
    }
    ClientTls tls;
    if (o.tls) {
      tls.ca_pem = ReadFileForFlag(f.tls_ca, "--tls-ca");
      tls.cert_pem = ReadFileForFlag(f.tls_cert, "--tls-cert");
      tls.key_pem = ReadFileForFlag(f.tls_key, "--tls-key");
    } else if (!f.insecure && !IsLoopback(f.server)) {
      throw CommandError("refusing plaintext with the server " + f.server +
                         ": give --tls-ca, --tls-cert and --tls-key, "
                         "or --insecure");
    }
    StrategySpec spec = Take(StrategySpec::Parse(f.gossip), "--gossip");
    const double wait_ms = Take(spec.GetDouble("wait_ms", 30000.0), "--gossip");
    exchange = std::make_unique<ServerExchange>(MakeGrpcFederationTransport(f.server, tls),
                                                "peer-" + std::to_string(f.partition_index), wait_ms);
    server_link = std::make_unique<ExchangeLink>(exchange.get());
    o.server = server_link.get();
  }

  std::unique_ptr<gossip::PeerStore> store;
  if (!f.db.empty()) store = Take(gossip::PeerStore::Open(f.db), "--db " + f.db);

  gossip::PeerNode node(o, factory.get(), std::move(initial), &trainer, store.get());
  gossip::PeerNodeStats stats = Take(node.Run(&StopRequested()), "peer");

  Evaluation eval = Take(trainer.EvaluateFully(*node.model()), "evaluation");
  spdlog::info("peer {} done: {} rounds, test accuracy {:.4f}, {} peers seen, {} bytes sent, {} received, {} refused",
               f.partition_index, stats.rounds_completed, eval.accuracy, stats.peers_seen.size(), stats.bytes_sent,
               stats.bytes_received, stats.frames_refused);
  if (!f.summary_out.empty()) {
    nlohmann::json j;
    j["node"] = f.partition_index;
    j["nodes"] = f.num_partitions;
    j["gossip"] = factory->description();
    j["merge"] = factory->merge_description();
    j["rounds"] = f.rounds;
    j["rounds_completed"] = stats.rounds_completed;
    j["resumed"] = stats.resumed;
    j["fetched_at_start"] = stats.fetched_at_start;
    j["final_test_accuracy"] = eval.accuracy;
    j["final_test_loss"] = eval.loss;
    if (model.language()) {  // loss per predicted byte, and the test text's unigram entropy to beat
      j["final_test_bits_per_char"] = BitsPerChar(eval.loss);
      j["unigram_bits_per_char"] = UnigramBitsPerChar(test_data);
    }
    j["peers_seen"] = stats.peers_seen.size();
    j["bytes_sent"] = stats.bytes_sent;
    j["bytes_received"] = stats.bytes_received;
    j["frames_refused"] = stats.frames_refused;
    j["models_received"] = stats.models_received;
    j["server_exchanges"] = stats.server_exchanges;
    j["messages_before_start"] = stats.messages_before_start;
    // Equal on every peer of a CRDT run whose replicas hold the same contributions.
    j["final_model_sha256"] = node.model()->ContentSha256();
    j["peak_rss_bytes"] = PeakRssBytes();
    j["cpu_seconds"] = CpuTimeSeconds();
    nlohmann::json members = nlohmann::json::array();
    for (const gossip::MemberUpdate& u : stats.members) {
      members.push_back({{"node", u.node}, {"address", u.address}, {"state", gossip::MemberStateName(u.state)}});
    }
    j["members"] = members;
    Check(WriteFileAtomically(f.summary_out, {j.dump(2), "\n"}), "--summary-out");
  }
  if (StopRequested().load()) spdlog::info("stopped on signal; run the same command (same --db) to continue");
}

}  // namespace

void AddPeerCommand(CLI::App& app) {
  auto f = std::make_shared<PeerFlags>();
  f->task.local_epochs = 1;
  CLI::App* cmd = app.add_subcommand("peer", "Run one node of a decentralized federation (gossip, no server)");
  cmd->add_option("--listen", f->listen, "Address to listen on, HOST:PORT")->capture_default_str();
  cmd->add_option("--advertise", f->advertise, "Address other peers dial (default: the listening address)");
  cmd->add_option("--peers", f->peers, "Peers to join through, HOST:PORT[,HOST:PORT...] (empty: wait for others)");
  cmd->add_option("--gossip", f->gossip,
                  "Algorithm, " + OneOf(gossip::GossipNames()) +
                      " each with its settings, e.g. el:s=2,wait_ms=W or crdt:interval_ms=I (docs/gossip.md)")
      ->capture_default_str();
  cmd->add_option("--merge", f->merge,
                  "Neighbour merge, " + OneOf(gossip::MergeRuleNames()) +
                      " with settings such as clipped:tau=T, balance:gamma=G (crdt: a strategy)")
      ->capture_default_str();
  cmd->add_option("--topology", f->topology,
                  "The graph, " + OneOf(gossip::Topology::Names()) + " regular takes d=D (default: the algorithm's)");
  cmd->add_option("--rounds", f->rounds, "Gossip rounds to complete")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--model", f->model,
                  "Model: mlp, cnn, or a TorchScript file saved from PyTorch (PATH.pt), the same file on every peer")
      ->capture_default_str();
  AddLossFlag(cmd, &f->loss);
  cmd->add_flag("--local-buffers", f->local_buffers,
                "Keep the TorchScript model's buffers (BatchNorm statistics) local to this peer (FedBN): it trains and "
                "evaluates with its own, whatever its neighbours send");
  cmd->add_option("--data-dir", f->data_dir, "Directory with the Fashion-MNIST IDX files")->capture_default_str();
  AddDataFlags(cmd, &f->data, "This peer's training data (partitioned like Fashion-MNIST)");
  cmd->add_option("--test-split", f->test_split,
                  "With --data: the share of this peer's partition held out (seeded) as its test examples")
      ->check(CLI::Range(0.01, 0.9))
      ->capture_default_str();
  cmd->add_option("--test-data", f->test_data,
                  "With --data: a file of test examples (read like --data) that this peer evaluates on instead of a "
                  "held-out share of its partition");
  cmd->add_option("--partition", f->partition, "iid, dirichlet:ALPHA or shards:S")->capture_default_str();
  cmd->add_option("--num-partitions", f->num_partitions, "Peers in the federation (the training set's partitions)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--partition-index", f->partition_index, "This peer's id and partition, in [0, num-partitions)")
      ->capture_default_str();
  cmd->add_option("--seed", f->seed, "Partition and initial-model seed (the same on every peer)")
      ->capture_default_str();
  cmd->add_option("--local-epochs", f->task.local_epochs, "Local epochs per round")->capture_default_str();
  cmd->add_option("--local-steps", f->task.local_steps, "Local SGD steps per round (overrides epochs when > 0)")
      ->capture_default_str();
  cmd->add_option("--batch-size", f->task.batch_size, "Local batch size")->capture_default_str();
  cmd->add_option("--lr", f->task.learning_rate, "Learning rate")->capture_default_str();
  cmd->add_option("--momentum", f->task.momentum, "SGD momentum")->capture_default_str();
  cmd->add_option("--optimizer", f->task.optimizer, "Inner optimizer: sgd (with --momentum) or adamw")
      ->check(CLI::IsMember({"sgd", "adamw"}))
      ->capture_default_str();
  cmd->add_option("--weight-decay", f->task.weight_decay, "AdamW's decoupled weight decay")->capture_default_str();
  cmd->add_option("--db", f->db, "SQLite file for the peer's model, round and membership (restart to continue)");
  cmd->add_option("--summary-out", f->summary_out, "Write a summary JSON here at the end");
  cmd->add_option("--tls-ca", f->tls_ca, "CA certificate (PEM) of the federation (plexus certs init)");
  cmd->add_option("--tls-cert", f->tls_cert,
                  "This peer's certificate, named peer-<partition-index> "
                  "(plexus certs issue --peer)");
  cmd->add_option("--tls-key", f->tls_key, "This peer's private key (PEM)");
  cmd->add_flag("--insecure", f->insecure, "Allow plaintext links to other machines");
  cmd->add_option("--server", f->server,
                  "semidecentralized: the plexus server, HOST:PORT (async mode, --buffer-size K, --server-lr 1); "
                  "the peer is its client peer-<index>, with the peer's certificate under TLS");
  cmd->add_option("--threads", f->threads, "LibTorch threads")->check(CLI::Range(1, 256))->capture_default_str();
  cmd->add_option("--test-subset", f->test_subset, "Evaluate on the first N test examples (0 = all)");
  cmd->add_option("--linger-s", f->linger_s, "Seconds to stay after the last round, delivering queued models")
      ->check(CLI::Range(0.0, 600.0))
      ->capture_default_str();
  cmd->add_option("--eval-every", f->eval_every,
                  "Evaluate the peer's own model every this many rounds, for the log and plexus status --peer (0: "
                  "only at the end)")
      ->capture_default_str();
  cmd->add_option("--start-wait-s", f->start_wait_s,
                  "Before the first round, wait this long after meeting a first peer for the others to show up")
      ->capture_default_str();
  cmd->add_option("--model-stall-s", f->model_stall_s,
                  "Close a link whose announced model delivers nothing for this many seconds (its bytes are "
                  "given back to the inbound budget)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--inbound-budget-mb", f->inbound_budget_mb,
                  "Stop reading links while more than this many MiB of models are being received or decoded; one "
                  "link's unfinished models may hold a quarter of it (or one model)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--give-up-s", f->give_up_s, "Give up when no peer has answered for this many seconds at the start")
      ->check(CLI::Range(1.0, 86400.0))
      ->capture_default_str();
  cmd->add_option("--trainer", f->trainer,
                  "torch (LibTorch) or portable (plain C++, the same bits on every architecture; slower)")
      ->check(CLI::IsMember({"torch", "portable"}))
      ->capture_default_str();
  cmd->add_option("--attack", f->attack,
                  "For tests and demonstrations only: make this peer an attacker, signflip[:scale=S] or scale:f=F")
      ->capture_default_str();
  AddConfigOption(cmd);
  cmd->callback([f] {
    DefaultDataForModel(f->model, f->loss, &f->data);
    RunPeer(*f);
  });
}

}  // namespace plexus::cli
