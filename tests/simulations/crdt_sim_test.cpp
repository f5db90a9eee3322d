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
  }
}

TEST(CrdtSimTest, BadOptionsAreRefused) {
  CrdtSimOptions o;
  o.replicas = 1;
  EXPECT_THAT(RunCrdtSimulation(o, nullptr).status(), StatusIs(StatusCode::kInvalidArgument, "--crdt-replicas"));
}

}  // namespace
}  // namespace plexus
