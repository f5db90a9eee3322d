#include "client/failover_transport.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"

namespace plexus {
namespace {

// A server per address: up or down, counting the calls it took and whether it was shut down.
struct FakeServer {
  bool up = true;
  int calls = 0;
  bool shut_down = false;
  std::vector<std::string> fallbacks;  // named at join
};

class FakeTransport final : public FederationTransport {
 public:
  explicit FakeTransport(FakeServer* server) : server_(server) {}
  Result<JoinReply> Join(const std::string& id, int64_t, const std::string&) override {
    PLEXUS_RETURN_IF_ERROR(Call());
    JoinReply r;
    r.client_id = id;
    r.fallback_servers = server_->fallbacks;
    return r;
  }
  Result<PollAnswer> Poll(const std::string&, int64_t) override {
    PLEXUS_RETURN_IF_ERROR(Call());
    return PollAnswer{};
  }
  Status Download(uint64_t, DownloadSink*) override { return Call(); }
  Result<UploadAck> Upload(const UploadHeader&, std::shared_ptr<const Payload>) override {
    PLEXUS_RETURN_IF_ERROR(Call());
    return NotFoundError("unknown task");  // an answer: the server is alive
  }
  void Shutdown() override { server_->shut_down = true; }

 private:
  Status Call() {
    ++server_->calls;
    return server_->up ? Status::Ok() : UnavailableError("connection refused");
  }
  FakeServer* server_;
};

class FailoverTransportTest : public ::testing::Test {
 protected:
  std::unique_ptr<FailoverTransport> Make(std::vector<std::string> addresses) {
    return std::make_unique<FailoverTransport>(
        std::move(addresses), [this](const std::string& a) { return std::make_unique<FakeTransport>(&servers_[a]); },
        /*switch_after_ms=*/2000, &clock_);
  }
  std::map<std::string, FakeServer> servers_;
  ManualClock clock_;
};

TEST_F(FailoverTransportTest, TurnsToTheNextServerOnceTheCurrentOneHasFailedLongEnough) {
  auto t = Make({"a:1", "b:1"});
  servers_["a:1"].up = false;
  EXPECT_EQ(t->Poll("c", 0).status().code(), StatusCode::kUnavailable);
  clock_.AdvanceMs(1999);
  EXPECT_EQ(t->Poll("c", 0).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(t->current_address(), "a:1") << "not before switch_after_ms of failures";
  clock_.AdvanceMs(1);
  EXPECT_EQ(t->Poll("c", 0).status().code(), StatusCode::kUnavailable) << "the failing call's error goes back";
  EXPECT_EQ(t->current_address(), "b:1");
  EXPECT_TRUE(t->Poll("c", 0).ok());
  EXPECT_EQ(servers_["b:1"].calls, 1);
  EXPECT_EQ(servers_["a:1"].calls, 3);
}

TEST_F(FailoverTransportTest, AnyAnswerShowsTheServerAliveAndOneServerNeverSwitches) {
  auto t = Make({"a:1", "b:1"});
  servers_["a:1"].up = false;
  EXPECT_FALSE(t->Poll("c", 0).ok());
  clock_.AdvanceMs(1500);
  servers_["a:1"].up = true;
  EXPECT_EQ(t->Upload(UploadHeader{}, Payload::Of(std::string())).status().code(),
            StatusCode::kNotFound);  // an error, but an answer
  servers_["a:1"].up = false;
  clock_.AdvanceMs(1500);
  EXPECT_FALSE(t->Poll("c", 0).ok());
  EXPECT_EQ(t->current_address(), "a:1") << "the failures since the answer last 0 ms, not 3000";

  auto alone = Make({"x:1"});
  servers_["x:1"].up = false;
  for (int i = 0; i < 5; ++i, clock_.AdvanceMs(5000)) EXPECT_FALSE(alone->Poll("c", 0).ok());
  EXPECT_EQ(alone->current_address(), "x:1");
}

TEST_F(FailoverTransportTest, FallbacksNamedAtJoinAreTurnedToAndShutdownReachesTheNewTransport) {
  servers_["a:1"].fallbacks = {"b:1", "a:1"};
  auto t = Make({"a:1"});
  ASSERT_TRUE(t->Join("c", 1, "test").ok());
  EXPECT_EQ(t->addresses(), (std::vector<std::string>{"a:1", "b:1"})) << "each address once";
  servers_["a:1"].up = false;
  EXPECT_FALSE(t->Poll("c", 0).ok());
  clock_.AdvanceMs(2000);
  EXPECT_FALSE(t->Poll("c", 0).ok());
  EXPECT_EQ(t->current_address(), "b:1");
  t->Shutdown();
  EXPECT_TRUE(servers_["b:1"].shut_down);
}

TEST(ShardAddressesTest, AClientAlwaysGetsItsOwnShardFirstAndTheOthersInOrder) {
  const std::vector<std::string> a = *ShardAddresses("edge-{shard}.edges:50051", 4, "device-17");
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a, *ShardAddresses("edge-{shard}.edges:50051", 4, "device-17")) << "the same every time";
  const int first = a[0][5] - '0';
  for (int k = 0; k < 4; ++k) EXPECT_EQ(a[k], "edge-" + std::to_string((first + k) % 4) + ".edges:50051");
  // Ids spread over the shards.
  std::map<std::string, int> firsts;
  for (int i = 0; i < 400; ++i) ++firsts[(*ShardAddresses("s{shard}", 4, "c" + std::to_string(i)))[0]];
  EXPECT_EQ(firsts.size(), 4u);
  for (const auto& [shard, n] : firsts) EXPECT_GT(n, 60) << shard;
  EXPECT_FALSE(ShardAddresses("edge:50051", 4, "c").ok());
  EXPECT_FALSE(ShardAddresses("edge-{shard}", 0, "c").ok());
  EXPECT_FALSE(ShardAddresses("edge-{shard}", 4, "").ok());
}

}  // namespace
}  // namespace plexus
