#include "simulations/crdt_sim.h"

#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

TEST(CrdtSimTest, ReplicasAgreeThroughDuplicatesDelaysAndAPartition) {
  CrdtSimOptions o;
  o.replicas = 12;
  o.orderings = 3;
  o.contributions = 6;
  o.partition_heal = true;
  Result<std::vector<CrdtOrdering>> r = RunCrdtSimulation(o, nullptr);
  ASSERT_OK(r);
  ASSERT_EQ(r->size(), 3u);
  for (const CrdtOrdering& ordering : *r) {
    EXPECT_TRUE(ordering.identical) << ordering.ordering;
    EXPECT_EQ(ordering.hashes, (*r)[0].hashes);  // the same set in every ordering
    EXPECT_EQ(ordering.live, 5);                 // the poisoned one retracted, the re-added one kept
    EXPECT_GT(ordering.node_hashes, 0);
    EXPECT_GT(ordering.messages_lost, 0);   // sent across the partition
    EXPECT_GE(ordering.converged_s, 10.0);  // not before the partition healed (10 intervals of 1 s)
  }
}

TEST(CrdtSimTest, SlowLinksTakeLongerToConvergeOnTheSameResult) {
  CrdtSimOptions o;
  o.replicas = 10;
  o.orderings = 1;
  o.contributions = 4;
  o.mbps = 100;
  Result<std::vector<CrdtOrdering>> fast = RunCrdtSimulation(o, nullptr);
  o.mbps = 0.05;  // a contribution of 8 KB takes over a second each way
  Result<std::vector<CrdtOrdering>> slow = RunCrdtSimulation(o, nullptr);
  ASSERT_OK(fast);
  ASSERT_OK(slow);
  EXPECT_TRUE((*fast)[0].identical);
  EXPECT_TRUE((*slow)[0].identical);
  EXPECT_EQ((*fast)[0].hashes, (*slow)[0].hashes);
  EXPECT_GT((*slow)[0].converged_s, (*fast)[0].converged_s);
  EXPECT_GT((*fast)[0].bytes, 4u * 64 * 33 * 4);  // every replica got the contributions at least once
}

TEST(CrdtSimTest, BadOptionsAreRefused) {
  CrdtSimOptions o;
  o.replicas = 1;
  EXPECT_THAT(RunCrdtSimulation(o, nullptr).status(), StatusIs(StatusCode::kInvalidArgument, "--crdt-replicas"));
  o.replicas = 4;
  o.gossip_interval_ms = 0;
  EXPECT_THAT(RunCrdtSimulation(o, nullptr).status(), StatusIs(StatusCode::kInvalidArgument, "gossip interval"));
}

}  // namespace
}  // namespace plexus
