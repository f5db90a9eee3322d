// The decentralized simulator with a stand-in Trainer whose every step is known (it adds 0.01 to
// each weight per local step), so the models the protocols end with can be checked exactly.
#include "simulations/gossip_sim.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "compute/model_zoo.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/synthetic_data.h"

namespace plexus {
namespace {

class AddingTrainer final : public Trainer {
 public:
  Result<TrainOutcome> Train(const ModelState& start, const DatasetView& data, const TrainOptions& o) override {
    TrainOutcome out;
    out.weights = start;
    for (float& x : out.weights.data()) x += 0.01f * static_cast<float>(o.local_steps);
    out.num_examples = static_cast<int64_t>(data.size());
    out.steps = o.local_steps;
    out.mean_loss = 1.0;
    return out;
  }
  Result<Evaluation> Evaluate(const ModelState&, const DatasetView&) override { return Evaluation{}; }
};

class CountingEvaluator final : public ModelEvaluator {
 public:
  Result<Evaluation> Evaluate(const ModelState&) override {
    ++calls;
    return Evaluation{0.5, 1.0, 10};
  }
  int calls = 0;
};

Dataset Synthetic(size_t n) { return ::plexus::testing::SyntheticData(n); }

GossipSimOptions Small(const std::string& gossip, const std::string& topology, int64_t nodes, int64_t rounds) {
  GossipSimOptions o;
  o.nodes = nodes;
  o.rounds = rounds;
  o.gossip = gossip;
  o.topology = topology;
  o.seed = 5;
  o.task.local_steps = 2;
  o.devices.ms_per_step = 10;
  o.devices.task_overhead_ms = 0;
  o.eval_nodes = 4;
  return o;
}

class GossipSimTest : public ::testing::Test {
 protected:
  Result<GossipResult> Run(const GossipSimOptions& o) {
    LocalTaskRunner runner(&trainer_, &data_);
    return RunGossipSimulation(o, &data_, o.train ? &runner : nullptr, &average_, &nodes_, nullptr);
  }
  // How far every weight of `m` moved from the seed's initial model, on average.
  static double Shift(const GossipSimOptions& o, const ModelState& m) {
    ModelState initial = *InitModel(o.model, o.seed);
    double s = 0.0;
    for (size_t k = 0; k < m.num_params(); ++k) s += m.data()[k] - initial.data()[k];
    return s / static_cast<double>(m.num_params());
  }

  AddingTrainer trainer_;
  Dataset data_ = Synthetic(2000);
  CountingEvaluator average_, nodes_;
};

TEST_F(GossipSimTest, DpsgdKeepsTheAverageAndEveryNodesSteps) {
  GossipSimOptions o = Small("dpsgd", "regular:d=4", 16, 3);
  Result<GossipResult> r = Run(o);
  ASSERT_OK(r.status());
  ASSERT_EQ(r->rounds.size(), 3u);
  EXPECT_EQ(r->rounds_completed, 3);
  // Everyone started alike and took the same steps: the merge must not move anything else.
  EXPECT_NEAR(Shift(o, r->final_model), 3 * 0.02, 1e-5);
  EXPECT_NEAR(r->consensus_distance, 0.0, 1e-4);
  EXPECT_EQ(r->trainings, 16 * 3);  // (the 4th round's jobs have started, not finished)
  // Four neighbours per round, each sent the model plus a header.
  const double model_bytes = static_cast<double>(InitModel("mlp", 0)->num_bytes());
  EXPECT_NEAR(r->bytes_sent_per_node, 3 * 4 * (model_bytes + 64), 1.0);
  EXPECT_EQ(average_.calls, 3);
  EXPECT_EQ(nodes_.calls, 3 * 4);
  EXPECT_EQ(r->messages_lost, 0);
}

TEST_F(GossipSimTest, TheSameSeedGivesTheSameModelAndAnotherSeedAnother) {
  for (const char* gossip : {"el:s=2", "dpsgd", "pushsum"}) {
    GossipSimOptions o = Small(gossip, "", 12, 4);
    o.train = false;  // the nodes start apart and only mix
    Result<GossipResult> a = Run(o), b = Run(o);
    ASSERT_OK(a.status());
    ASSERT_OK(b.status());
    EXPECT_EQ(a->final_model_sha256, b->final_model_sha256) << gossip;
    o.seed = 6;
    Result<GossipResult> c = Run(o);
    ASSERT_OK(c.status());
    EXPECT_NE(a->final_model_sha256, c->final_model_sha256) << gossip;
  }
}

TEST_F(GossipSimTest, WithoutTrainingTheNodesAgreeRoundAfterRound) {
  GossipSimOptions o = Small("dpsgd", "ring", 16, 6);
  o.train = false;
  Result<GossipResult> r = Run(o);
  ASSERT_OK(r.status());
  ASSERT_EQ(r->rounds.size(), 6u);
  for (size_t i = 1; i < r->rounds.size(); ++i) {
    EXPECT_LT(r->rounds[i].consensus_distance, r->rounds[i - 1].consensus_distance) << "round " << i + 1;
  }
  EXPECT_EQ(average_.calls, 0);  // nothing to evaluate without training
}

TEST_F(GossipSimTest, ChurnDoesNotStallTraining) {
  for (const char* gossip : {"el:s=3", "dpsgd", "pushsum", "choco:codec=int8"}) {
    GossipSimOptions o = Small(gossip, gossip == std::string("pushsum") ? "exponential" : "", 20, 9);
    o.churn_fraction = 0.2;
    o.churn_every = 2;
    Result<GossipResult> r = Run(o);
    ASSERT_OK(r.status()) << gossip;
    ASSERT_EQ(r->rounds.size(), 9u) << gossip;
    EXPECT_EQ(r->rounds[0].live_nodes, 20);
    EXPECT_EQ(r->rounds[2].live_nodes, 16) << gossip;  // four left after round 2
    EXPECT_EQ(r->rounds[4].live_nodes, 16) << gossip;  // they came back, four others left
    // Everyone keeps training: the average moved by about 0.02 per round (push-sum's mass
    // moves with the leavers, so its average is the live nodes' estimate).
    EXPECT_GT(Shift(o, r->final_model), 0.5 * 9 * 0.02) << gossip;
  }
}

TEST_F(GossipSimTest, APartitionLosesMessagesAndConsensusRecoversAfterTheHeal) {
  GossipSimOptions o = Small("el:s=3", "complete", 16, 10);
  o.train = false;
  o.partition_at = 2;
  o.heal_at = 5;
  Result<GossipResult> r = Run(o);
  ASSERT_OK(r.status());
  EXPECT_GT(r->messages_lost, 0);
  EXPECT_FALSE(r->rounds[1].partitioned);
  EXPECT_TRUE(r->rounds[2].partitioned);
  EXPECT_FALSE(r->rounds[5].partitioned);
  EXPECT_GE(r->rounds_to_recover, 1);
}

// SWIM on the simulated network: a churned node crashes without a word, so for a while the live
// nodes hold it live (wrong views), until probes find it silent, suspect it and bury it; a
// partition makes each half bury the other, and after the heal reconnect pings bring them back
// (refutations), so every view is right again by the end. The oracle counts none of it.
TEST_F(GossipSimTest, SwimFindsCrashedNodesAndRejoinsTheHalvesOfAHealedPartition) {
  GossipSimOptions o = Small("dpsgd", "ring", 12, 24);
  o.train = false;
  o.liveness = "swim";
  o.churn_fraction = 0.25;
  o.churn_every = 4;
  Result<GossipResult> churned = Run(o);
  ASSERT_OK(churned.status());
  EXPECT_TRUE(churned->swim);
  EXPECT_GT(churned->suspicions, 0);
  EXPECT_GT(churned->deaths, 0);
  int64_t most_wrong = 0;
  for (const GossipRound& g : churned->rounds) most_wrong = std::max(most_wrong, g.membership_errors);
  EXPECT_GT(most_wrong, 0) << "a crash is not known at once";

  o.churn_fraction = 0;
  o.partition_at = 3;
  o.heal_at = 12;
  Result<GossipResult> split = Run(o);
  ASSERT_OK(split.status());
  EXPECT_GT(split->rounds[11].membership_errors, 0) << "the halves hold each other dead";
  EXPECT_GT(split->refutations, 0) << "a reconnect ping carried the word of a death to a live node";
  EXPECT_EQ(split->rounds.back().membership_errors, 0) << "after the heal every view is right again";

  o.liveness = "oracle";
  Result<GossipResult> oracle = Run(o);
  ASSERT_OK(oracle.status());
  EXPECT_FALSE(oracle->swim);
  EXPECT_EQ(oracle->suspicions + oracle->deaths + oracle->refutations, 0);
  EXPECT_EQ(oracle->rounds.back().membership_errors, 0);
}

TEST_F(GossipSimTest, ATrimmedMeanHoldsOffSignFlippingNeighboursThatAPlainMeanLetsIn) {
  GossipSimOptions o = Small("dpsgd", "regular:d=4", 20, 4);
  Result<GossipResult> clean = Run(o);
  ASSERT_OK(clean.status());
  o.attack = "signflip";
  o.attackers = 0.1;
  Result<GossipResult> mean = Run(o);
  o.merge = "trimmed_mean:beta=0.2";
  Result<GossipResult> trimmed = Run(o);
  ASSERT_OK(mean.status());
  ASSERT_OK(trimmed.status());
  EXPECT_EQ(mean->attackers, 2);
  const double free = Shift(o, clean->final_model);
  const double hurt = std::abs(Shift(o, mean->final_model) - free);
  const double held = std::abs(Shift(o, trimmed->final_model) - free);
  EXPECT_GT(hurt, 0.5 * free);   // the attack bites
  EXPECT_LT(held, 0.25 * hurt);  // the defence holds (a node with two lying neighbours trims one)
  std::printf("attack-free shift %.4f, plain mean off by %.4f, trimmed mean off by %.4f\n", free, hurt, held);
}

TEST_F(GossipSimTest, ASemiDecentralizedServerToAllRoundBringsEveryNodeToOneModel) {
  GossipSimOptions o = Small("semidecentralized:every=2,sample=3,mode=s2a", "ring", 8, 4);
  o.train = false;  // the nodes start apart: only the server's average can make them agree at once
  Result<GossipResult> r = Run(o);
  ASSERT_OK(r.status());
  ASSERT_EQ(r->rounds.size(), 4u);
  EXPECT_GT(r->rounds[1].consensus_distance, 0.1);   // measured before the server's answer
  EXPECT_LT(r->rounds[2].consensus_distance, 1e-4);  // everyone took the average, then gossiped
  // Two nodes per ring neighbourhood each round, plus three uploads every second round.
  const double model_bytes = static_cast<double>(InitModel("mlp", 0)->num_bytes()) + 64;
  EXPECT_NEAR(r->bytes_sent_per_node, (4 * 2 * 8 + 2 * 3) * model_bytes / 8, 1.0);
}

TEST_F(GossipSimTest, ChocoWithALosslessCodecAndFullStepIsDpsgd) {
  GossipSimOptions o = Small("dpsgd", "ring", 12, 5);
  o.train = false;  // the nodes start apart and only mix
  Result<GossipResult> dpsgd = Run(o);
  o.gossip = "choco:codec=f32,gamma=1";
  Result<GossipResult> choco = Run(o);
  ASSERT_OK(dpsgd.status());
  ASSERT_OK(choco.status());
  ASSERT_EQ(choco->rounds.size(), dpsgd->rounds.size());
  for (size_t i = 0; i < dpsgd->rounds.size(); ++i) {
    EXPECT_NEAR(choco->rounds[i].consensus_distance, dpsgd->rounds[i].consensus_distance,
                1e-4 * dpsgd->rounds[i].consensus_distance)
        << "round " << i + 1;
  }
}

TEST_F(GossipSimTest, ChocoReachesConsensusSendingCompressedChangesOnly) {
  GossipSimOptions o = Small("dpsgd", "ring", 12, 12);
  o.train = false;
  Result<GossipResult> exact = Run(o);
  ASSERT_OK(exact.status());
  for (const char* gossip : {"choco:codec=int8,gamma=1", "choco:codec=int8,gamma=0.5"}) {
    o.gossip = gossip;
    Result<GossipResult> r = Run(o);
    ASSERT_OK(r.status());
    // The nodes draw together round after round, though what travels is quantized.
    EXPECT_LT(r->rounds.back().consensus_distance, 0.6 * r->rounds.front().consensus_distance) << gossip;
    EXPECT_EQ(r->rounds_completed, 12) << gossip;
    EXPECT_NEAR(r->bytes_sent_per_node / exact->bytes_sent_per_node, 0.25, 0.01) << gossip;  // a byte per value
  }
  // With the full step, within a few percent of the exact consensus.
  o.gossip = "choco:codec=int8,gamma=1";
  Result<GossipResult> full = Run(o);
  ASSERT_OK(full.status());
  EXPECT_LT(full->rounds.back().consensus_distance, 1.1 * exact->rounds.back().consensus_distance);
  // Top-k 1% sends 2% of the bytes (an index and a value per value sent); from models this far
  // apart it needs a small step and many more rounds than this to agree (docs/gossip.md).
  o.gossip = "choco:codec=topk,gamma=0.05";
  Result<GossipResult> topk = Run(o);
  ASSERT_OK(topk.status());
  EXPECT_NEAR(topk->bytes_sent_per_node / exact->bytes_sent_per_node, 0.02, 0.005);
}

TEST_F(GossipSimTest, BadSettingsNameTheFlag) {
  auto error = [&](GossipSimOptions o) {
    Result<GossipResult> r = Run(o);
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string() : r.status().message();
  };
  GossipSimOptions o = Small("el", "", 7, 3);
  o.gossip = "flood";
  EXPECT_NE(error(o).find("--gossip"), std::string::npos);
  o = Small("dpsgd", "regular:d=5", 7, 3);
  EXPECT_NE(error(o).find("--topology: regular:d=5 needs N x d even"), std::string::npos);
  o = Small("el", "", 7, 3);
  o.attack = "alie";
  o.attackers = 0.95;
  EXPECT_NE(error(o).find("--attackers"), std::string::npos);
  o = Small("choco:gamma=2", "", 8, 3);
  EXPECT_NE(error(o).find("choco:gamma must be in (0, 1]"), std::string::npos);
  o = Small("choco:codec=zip", "", 8, 3);
  EXPECT_NE(error(o).find("unknown codec 'zip'"), std::string::npos);
  o = Small("pushsum", "", 8, 3);
  o.attack = "alie";
  o.attackers = 0.1;
  EXPECT_NE(error(o).find("only labelflip"), std::string::npos);
  o = Small("el", "", 8, 3);
  o.partition_at = 4;
  o.heal_at = 2;
  EXPECT_NE(error(o).find("--heal-at"), std::string::npos);
  o.partition_at = -1;
  o.heal_at = -1;
  o.liveness = "gossip";
  EXPECT_NE(error(o).find("--liveness"), std::string::npos);
  o.liveness = "swim";
  o.nodes = GossipSimOptions::kMaxSwimNodes + 1;
  EXPECT_NE(error(o).find("--liveness oracle"), std::string::npos);
  o.nodes = 7;
  o.liveness = "auto";
  o.churn_fraction = 0.2;
  EXPECT_NE(error(o).find("--churn"), std::string::npos);
}

}  // namespace
}  // namespace plexus
