// PeerNode in one process: three real peers on 127.0.0.1, each on its own thread with its own
// libuv loop, gossiping a small model with D-PSGD. The assertions read what the nodes report
// (PeerNodeStats: rounds, peers met, refusals, the membership each ends with) and their models,
// never their logs.
#include "gossip/node/peer_node.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>

#include "apps/plexus/certificate_authority.h"
#include "core/file_contents.h"
#include "gossip/protocol/registry.h"
#include "tests/integration/process.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/vector_model.h"

namespace plexus::gossip {
namespace {

// Adds 1 to every weight per round: after R rounds of averaging equal models, every weight is R.
class AddOneTrainer final : public PeerTrainer {
 public:
  Result<ModelState> Train(const ModelState& start, uint64_t) override {
    ModelState out = start;
    for (float& x : out.data()) x += 1.0f;
    return out;
  }
  Result<double> Evaluate(const ModelState&) override { return 0.5; }
};

// Node 2's trainer in the early-stop test: from round 1 on it asks its node to stop and holds the
// round's training until the test opens the gate (once both other nodes report it gone), so the
// node stops in the middle of a round, whatever the machine's speed.
class GatedTrainer final : public PeerTrainer {
 public:
  explicit GatedTrainer(std::atomic<bool>* stop) : stop_(stop), gate_(opened_.get_future().share()) {}
  Result<ModelState> Train(const ModelState& start, uint64_t round) override {
    if (round >= 1) {
      stop_->store(true);
      // A guard against a hang, not a synchronization: the gate opens as soon as the others
      // report the node gone.
      if (gate_.wait_for(std::chrono::seconds(60)) != std::future_status::ready) return DeadlineExceededError("gate");
    }
    ModelState out = start;
    for (float& x : out.data()) x += 1.0f;
    return out;
  }
  Result<double> Evaluate(const ModelState&) override { return 0.5; }
  void Open() {
    if (!open_.exchange(true)) opened_.set_value();
  }

 private:
  std::atomic<bool>* stop_;
  std::atomic<bool> open_{false};
  std::promise<void> opened_;
  std::shared_future<void> gate_;
};

constexpr size_t kNodes = 3;
constexpr uint64_t kRounds = 4;

class PeerNodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<ProtocolFactory>> f = MakeGossip("dpsgd", "mean");
    ASSERT_OK(f.status());
    factory_ = std::move(f).value();
    for (size_t i = 0; i < kNodes; ++i) address_[i] = "127.0.0.1:" + std::to_string(::plexus::testing::FreePort());
  }

  PeerNodeOptions Options(NodeId self) const {
    PeerNodeOptions o;
    o.self = self;
    o.nodes = kNodes;
    o.listen = address_[self];
    if (self != 0) o.seeds = {address_[0]};
    o.rounds = kRounds;
    o.topology = "complete";
    o.run = "peer-node-test";
    o.linger_ms = 300;
    o.eval_every = 0;
    o.inbound_budget = 4 << 20;
    return o;
  }

  // Runs every node on its own thread until it returns; `stop[i]` may stop node i early.
  std::vector<Result<PeerNodeStats>> RunAll(std::array<std::atomic<bool>, kNodes>* stop,
                                            const std::function<void(NodeId, const PeerNodeStats&)>& progress,
                                            PeerTrainer* last_trainer = nullptr) {
    std::vector<Result<PeerNodeStats>> results(kNodes, InternalError("not run"));
    std::vector<std::unique_ptr<PeerNode>> nodes;
    for (NodeId i = 0; i < kNodes; ++i) {
      PeerTrainer* trainer = i == kNodes - 1 && last_trainer != nullptr ? last_trainer : &trainer_;
      nodes.push_back(std::make_unique<PeerNode>(
          Options(i), factory_.get(), ::plexus::testing::VectorModel({0, 0, 0, 0, 0, 0, 0, 0}), trainer, nullptr));
    }
    std::vector<std::thread> threads;
    for (NodeId i = 0; i < kNodes; ++i) {
      threads.emplace_back(
          [&, i] { results[i] = nodes[i]->Run(&(*stop)[i], [&, i](const PeerNodeStats& s) { progress(i, s); }); });
    }
    for (std::thread& t : threads) t.join();
    for (NodeId i = 0; i < kNodes; ++i) models_[i] = nodes[i]->model();
    return results;
  }

  static MemberState StateOf(const PeerNodeStats& s, NodeId node) {
    for (const MemberUpdate& u : s.members) {
      if (u.node == node) return u.state;
    }
    return MemberState::kDead;  // never heard of
  }

  std::unique_ptr<ProtocolFactory> factory_;
  AddOneTrainer trainer_;
  std::array<std::string, kNodes> address_;
  std::array<std::shared_ptr<const ModelState>, kNodes> models_;
};

TEST_F(PeerNodeTest, ThreePeersFinishEveryRoundTogetherAndEndWithTheSameModel) {
  std::array<std::atomic<bool>, kNodes> stop{};
  std::vector<Result<PeerNodeStats>> results = RunAll(&stop, [](NodeId, const PeerNodeStats&) {});
  for (NodeId i = 0; i < kNodes; ++i) {
    ASSERT_OK(results[i].status()) << "node " << i;
    const PeerNodeStats& s = *results[i];
    EXPECT_EQ(s.rounds_completed, kRounds) << "node " << i;
    EXPECT_EQ(s.peers_seen.size(), kNodes - 1) << "node " << i;
    EXPECT_EQ(s.frames_refused, 0u) << "node " << i;
    EXPECT_GE(s.models_received, (kNodes - 1) * (kRounds - 1)) << "node " << i;
    EXPECT_GT(s.bytes_sent, 0u);
    for (NodeId j = 0; j < kNodes; ++j) {
      if (j == i) continue;
      const MemberState state = StateOf(s, j);
      EXPECT_TRUE(state == MemberState::kAlive || state == MemberState::kLeft)
          << "node " << i << " holds node " << j << " " << MemberStateName(state);
    }
    ASSERT_NE(models_[i], nullptr);
    for (float x : models_[i]->data()) EXPECT_FLOAT_EQ(x, static_cast<float>(kRounds)) << "node " << i;
  }
}

// Node 2 is stopped in its second round: it says goodbye, the others mark it as having left (not
// dead: no suspicion timeout is waited for) and finish every round without it.
TEST_F(PeerNodeTest, APeerStoppedEarlyIsSeenLeavingAndTheOthersFinishWithoutIt) {
  std::array<std::atomic<bool>, kNodes> stop{};
  GatedTrainer gated(&stop[2]);
  std::array<std::atomic<bool>, kNodes> saw_leave{};
  std::vector<Result<PeerNodeStats>> results = RunAll(
      &stop,
      [&](NodeId i, const PeerNodeStats& s) {
        if (i < 2 && StateOf(s, 2) == MemberState::kLeft) saw_leave[i] = true;
        if (saw_leave[0] && saw_leave[1]) gated.Open();
      },
      &gated);
  for (NodeId i = 0; i < kNodes; ++i) ASSERT_OK(results[i].status()) << "node " << i;
  EXPECT_LT(results[2]->rounds_completed, kRounds);
  for (NodeId i = 0; i < 2; ++i) {
    EXPECT_EQ(results[i]->rounds_completed, kRounds) << "node " << i;
    EXPECT_EQ(StateOf(*results[i], 2), MemberState::kLeft) << "node " << i;
    EXPECT_EQ(results[i]->frames_refused, 0u) << "node " << i;
  }
}

// Two peers started with the same --partition-index refuse each other's hello, and each gives up
// saying which address holds its index (it used to close the link as "a link to itself" and wait
// out --give-up-s with a generic question).
TEST_F(PeerNodeTest, TwoPeersWithTheSameIndexAreToldWhoElseHoldsIt) {
  std::array<PeerNodeOptions, 2> options{Options(1), Options(1)};
  options[1].listen = address_[2];
  options[1].seeds = {address_[1]};
  options[0].seeds = {};
  for (PeerNodeOptions& o : options) o.give_up_ms = 1500;
  std::array<std::atomic<bool>, 2> stop{};
  std::vector<Result<PeerNodeStats>> results(2, InternalError("not run"));
  std::vector<std::unique_ptr<PeerNode>> nodes;
  for (const PeerNodeOptions& o : options) {
    nodes.push_back(
        std::make_unique<PeerNode>(o, factory_.get(), ::plexus::testing::VectorModel({0, 0}), &trainer_, nullptr));
  }
  std::vector<std::thread> threads;
  for (size_t i = 0; i < 2; ++i) threads.emplace_back([&, i] { results[i] = nodes[i]->Run(&stop[i]); });
  for (std::thread& t : threads) t.join();
  EXPECT_THAT(results[0].status(), ::plexus::testing::StatusIs(
                                       StatusCode::kUnavailable,
                                       "the peer at " + address_[2] + " claims --partition-index 1, this peer's own"));
  EXPECT_THAT(results[1].status(), ::plexus::testing::StatusIs(
                                       StatusCode::kUnavailable,
                                       "the peer at " + address_[1] + " claims --partition-index 1, this peer's own"));
}

// A TCP relay on 127.0.0.1 in front of `target_port`: every link it accepts is passed through both
// ways, except for one fault on the wire: the first direction of any link to carry `flip_at`
// bytes gets one bit of that byte flipped (once per relay: which link carries the models
// depends on how the peers' dials race). Blocking sockets, a thread per direction.
class FlippingRelay {
 public:
  FlippingRelay(int target_port, uint64_t flip_at) : target_(target_port), flip_at_(flip_at) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = Loopback(0);
    socklen_t len = sizeof a;
    if (bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(listener_, 8) != 0 ||
        getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ADD_FAILURE() << "relay cannot listen";
    }
    port_ = ntohs(a.sin_port);
    accepter_ = std::thread([this] { Accept(); });
  }
  ~FlippingRelay() {
    shutdown(listener_, SHUT_RDWR);  // ends the blocked accept
    accepter_.join();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int fd : fds_) shutdown(fd, SHUT_RDWR);  // ends the blocked reads
    }
    for (std::thread& t : pipes_) t.join();
    for (int fd : fds_) close(fd);
    close(listener_);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  bool flipped() const { return flipped_; }

 private:
  static sockaddr_in Loopback(int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
  }
  void Accept() {
    for (;;) {
      const int in = accept(listener_, nullptr, nullptr);
      if (in < 0) return;
      const int out = socket(AF_INET, SOCK_STREAM, 0);
      const sockaddr_in target = Loopback(target_);
      std::lock_guard<std::mutex> lock(mu_);
      fds_.push_back(in);
      fds_.push_back(out);
      if (connect(out, reinterpret_cast<const sockaddr*>(&target), sizeof target) != 0) {
        shutdown(in, SHUT_RDWR);
        continue;
      }
      pipes_.emplace_back([this, in, out] { Pipe(in, out); });
      pipes_.emplace_back([this, in, out] { Pipe(out, in); });
    }
  }
  void Pipe(int from, int to) {
    std::vector<char> buf(1 << 16);
    uint64_t seen = 0;
    for (;;) {
      const ssize_t n = recv(from, buf.data(), buf.size(), 0);
      if (n <= 0) break;
      if (flip_at_ >= seen && flip_at_ < seen + static_cast<uint64_t>(n) && !flipped_.exchange(true)) {
        buf[flip_at_ - seen] ^= 0x10;
      }
      seen += static_cast<uint64_t>(n);
      if (send(to, buf.data(), static_cast<size_t>(n), MSG_NOSIGNAL) != n) break;
    }
    shutdown(to, SHUT_WR);
  }

  const int target_;
  const uint64_t flip_at_;
  int listener_ = -1;
  int port_ = 0;
  std::thread accepter_;
  std::mutex mu_;
  std::vector<int> fds_;
  std::vector<std::thread> pipes_;
  std::atomic<bool> flipped_{false};
};

// A byte altered on the wire never reaches a model: on a plaintext link the chunk's CRC-32C
// catches it, over TLS the record's authentication does; either way the receiving node refuses
// the link, and both nodes go on and finish every round with exact models. Each node is reached
// only through a relay (it advertises the relay's address), which flips a bit `flip_at` bytes into
// a link: inside the first model sent on it (512 KB, two full chunks and a short one), past the
// hellos: 100 000 falls in the first chunk (the safetensors header's, gathered), 400 000 in the
// second (read straight into the model on a plaintext link, FrameReader::Placer).
class AlteredBytesTest : public PeerNodeTest, public ::testing::WithParamInterface<std::tuple<bool, uint64_t>> {};

TEST_P(AlteredBytesTest, AByteFlippedInFlightIsRefusedAndNeverMerged) {
  const auto [tls, flip_at] = GetParam();
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("plexus_flip_" + std::to_string(::getpid()));
  std::shared_ptr<const TlsContext> contexts[2];
  if (tls) {
    std::filesystem::remove_all(dir);
    ASSERT_OK(cli::CreateCertificateAuthority(dir, 1));
    for (int i = 0; i < 2; ++i) {
      const std::string name = "peer-" + std::to_string(i);
      ASSERT_OK(cli::IssueCertificate(dir, name, cli::CertificateKind::kPeer, 1));
      auto c = TlsContext::Create(*ReadFileContents(dir / "ca.crt"), *ReadFileContents(dir / (name + ".crt")),
                                  *ReadFileContents(dir / (name + ".key")));
      ASSERT_OK(c);
      contexts[i] = *c;
    }
  }
  Result<std::unique_ptr<ProtocolFactory>> f = MakeGossip("dpsgd:wait_ms=1000", "mean");
  ASSERT_OK(f.status());
  std::array<PeerNodeOptions, 2> options{Options(0), Options(1)};
  std::vector<std::unique_ptr<FlippingRelay>> relays;
  for (size_t i = 0; i < 2; ++i) {
    const int port = ::plexus::testing::FreePort();
    relays.push_back(std::make_unique<FlippingRelay>(port, flip_at));
    options[i].listen = "127.0.0.1:" + std::to_string(port);
    options[i].advertise = relays[i]->address();
  }
  options[1].seeds = {relays[0]->address()};
  for (size_t i = 0; i < 2; ++i) {
    options[i].nodes = 2;
    options[i].tls = contexts[i];
    options[i].start_wait_ms = 5000;
  }
  std::vector<float> zeros(128 << 10, 0.0f);
  std::array<std::atomic<bool>, 2> stop{};
  std::vector<Result<PeerNodeStats>> results(2, InternalError("not run"));
  std::vector<std::unique_ptr<PeerNode>> nodes;
  for (const PeerNodeOptions& o : options) {
    nodes.push_back(std::make_unique<PeerNode>(o, f->get(), ::plexus::testing::VectorModel(zeros), &trainer_, nullptr));
  }
  std::vector<std::thread> threads;
  for (size_t i = 0; i < 2; ++i) threads.emplace_back([&, i] { results[i] = nodes[i]->Run(&stop[i]); });
  for (std::thread& t : threads) t.join();
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(relays[0]->flipped() || relays[1]->flipped())
      << "no link carried " << flip_at << " bytes: nothing was tested";
  EXPECT_GE(results[0]->frames_refused + results[1]->frames_refused, 1u) << "the altered bytes were taken";
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_OK(results[i].status()) << "node " << i;
    EXPECT_EQ(results[i]->rounds_completed, kRounds) << "node " << i;
    for (float x : nodes[i]->model()->data()) ASSERT_EQ(x, static_cast<float>(kRounds)) << "node " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(PlainAndTls, AlteredBytesTest,
                         ::testing::Combine(::testing::Values(false, true), ::testing::Values(100000, 400000)),
                         [](const ::testing::TestParamInfo<std::tuple<bool, uint64_t>>& p) {
                           return std::string(std::get<0>(p.param) ? "Tls" : "Plaintext") +
                                  (std::get<1>(p.param) == 100000 ? "FirstChunk" : "SecondChunk");
                         });

}  // namespace
}  // namespace plexus::gossip
