// The discrete-event simulator with a stand-in Trainer whose work is known exactly, so virtual
// times can be checked to the millisecond.
#include "simulations/sim_runner.h"

#include "core/rng.h"

#include "compression/codec.h"
#include "compute/model_zoo.h"

#include <algorithm>
#include <cmath>

#include "tests/testing/status_matchers.h"
#include "tests/testing/synthetic_data.h"

namespace plexus {
namespace {

// Adds 0.01 to every weight in `local_steps` steps; reports the partition size as examples.
class StepCountingTrainer final : public Trainer {
 public:
  Result<TrainOutcome> Train(const ModelState& start, const DatasetView& data, const TrainOptions& o) override {
    TrainOutcome out;
    out.weights = start;
    for (float& x : out.weights.data()) x += 0.01f;
    out.num_examples = static_cast<int64_t>(data.size());
    out.steps = o.local_steps;
    out.mean_loss = 1.0;
    ++calls_;
    return out;
  }
  Result<Evaluation> Evaluate(const ModelState&, const DatasetView&) override { return Evaluation{}; }
  int calls() const { return calls_; }

 private:
  int calls_ = 0;
};

Dataset Synthetic(size_t n) { return ::plexus::testing::SyntheticData(n); }

// Two clients at 10 and 40 ms per step, 10 steps per task, no transfer overhead: tasks take
// 100 ms and 400 ms of virtual time.
SimOptions TwoSpeeds(const std::string& mode, int64_t versions) {
  SimOptions o;
  o.clients = 2;
  o.mode = ParseMode(mode).value();
  o.seed = 1;
  o.sync.rounds = versions;
  o.sync.clients_per_round = 2;
  o.sync.min_clients = 2;
  o.sync.task.local_steps = 10;
  o.async.buffer_size = 1;
  o.async.staleness = "constant";
  o.devices.ms_per_step = 10;
  o.devices.speed_ratio = 4;
  o.devices.task_overhead_ms = 0;
  return o;
}

class SimRunnerTest : public ::testing::Test {
 protected:
  Result<SimResult> Run(const SimOptions& o) {
    LocalTaskRunner runner(&trainer_, &data_);
    return RunSimulation(o, data_, &runner, nullptr, nullptr);
  }
  // With secure aggregation, a quarter of the members dropping at some stage: three versions,
  // three groups, each moving every weight by 0.01 (every client's update is +0.01 everywhere).
  Result<SimResult> RunWithDropouts(SimOptions o) {
    o.secagg_dropout = 0.25;
    Result<SimResult> r = Run(o);
    if (!r.ok()) return r;
    EXPECT_EQ(r->rounds.size(), 3u);
    EXPECT_NEAR(MeanDrift(*r, o.seed), 0.03, 1e-5);
    if (!r->secagg) return InternalError("no secure aggregation figures");
    EXPECT_EQ(r->secagg->groups_done, 3);
    return r;
  }
  // How far the final model's weights moved from the initial one's, on average.
  static double MeanDrift(const SimResult& r, uint64_t seed) {
    const ModelState initial = *InitModel("mlp", seed);
    double drift = 0;
    for (size_t k = 0; k < initial.num_params(); ++k) drift += r.final_model.data()[k] - initial.data()[k];
    return drift / static_cast<double>(initial.num_params());
  }
  Dataset data_ = Synthetic(100);
  StepCountingTrainer trainer_;
};

TEST_F(SimRunnerTest, SyncRoundsWaitForTheSlowestClient) {
  Result<SimResult> r = Run(TwoSpeeds("sync", 2));
  ASSERT_OK(r);
  ASSERT_EQ(r->rounds.size(), 2u);
  EXPECT_DOUBLE_EQ(r->rounds[0].virtual_time_s, 0.4);
  // The slow client polls again at 0.4 s and starts round 2 at once; the fast one, parked since
  // it was told to wait, polls again as the round opens; the round closes when the slow one is
  // done at 0.8 s.
  EXPECT_DOUBLE_EQ(r->rounds[1].virtual_time_s, 0.8);
  EXPECT_EQ(r->tasks_trained, 4);
}

TEST_F(SimRunnerTest, RefusesADeadlineNoQuorumCanMeet) {
  SimOptions o = TwoSpeeds("sync", 2);  // tasks of 100 ms and 400 ms; both needed to close
  o.sync.round_deadline_ms = 300;
  EXPECT_THAT(Run(o), ::plexus::testing::StatusIs(StatusCode::kInvalidArgument, "no round could close"));
  EXPECT_EQ(trainer_.calls(), 0);  // refused before anything ran
  o.sync.min_clients = 1;          // the fast client alone can close a round at its deadline
  o.sync.round_deadline_ms = 150;
  EXPECT_OK(Run(o));
}

TEST_F(SimRunnerTest, AsyncPublishesFastUpdatesWithoutWaiting) {
  Result<SimResult> r = Run(TwoSpeeds("async", 5));
  ASSERT_OK(r);
  ASSERT_EQ(r->rounds.size(), 5u);
  EXPECT_DOUBLE_EQ(r->rounds[0].virtual_time_s, 0.1);
  EXPECT_DOUBLE_EQ(r->rounds[2].virtual_time_s, 0.3);      // three fast tasks before the slow one ends
  EXPECT_EQ(r->rounds[3].record.merged[0].staleness, 3u);  // the slow update, 3 versions behind
}

// The virtual clients take the engine's answers through the ClientSession `plexus client` runs:
// the slow client's updates come 4 versions late, past a limit of 2, and from the second refusal
// for that reason on it waits 2 s before its next task instead of training again at once.
TEST_F(SimRunnerTest, ClientsBackOffAfterRefusalsAsTheRealClientDoes) {
  SimOptions o = TwoSpeeds("async", 20);  // the fast client alone publishes a version per 100 ms
  o.async.max_staleness = 2;
  Result<SimResult> r = Run(o);
  ASSERT_OK(r);
  ASSERT_EQ(r->rounds.size(), 20u);
  EXPECT_DOUBLE_EQ(r->virtual_time_s, 2.0);
  // Slow: trained at 0 s (refused at 0.4 s, polls at once) and at 0.4 s (refused at 0.8 s, waits
  // until 2.8 s): two tasks in the 2 s, not five.
  EXPECT_EQ(r->updates_refused, 2);
  EXPECT_EQ(r->waits_after_refusals, 1);
  EXPECT_EQ(r->tasks_trained, 22);
}

TEST_F(SimRunnerTest, SemiAsyncRunsAndIsDeterministic) {
  SimOptions o = TwoSpeeds("semiasync", 6);
  o.async.compass.q_min = 2;
  o.async.compass.q_max = 10;
  Result<SimResult> a = Run(o), b = Run(o);
  ASSERT_OK(a);
  ASSERT_OK(b);
  EXPECT_EQ(a->rounds.size(), 6u);
  EXPECT_EQ(a->final_model_sha256, b->final_model_sha256);
  EXPECT_EQ(a->virtual_time_s, b->virtual_time_s);
}

// --codec: the server gets what the codec kept, and the bytes counted are the encoded ones.
TEST_F(SimRunnerTest, UploadsAreCompressedAndCountedAsEncoded) {
  SimOptions o = TwoSpeeds("sync", 2);
  Result<SimResult> plain = Run(o);
  ASSERT_OK(plain);
  o.codec = "f32";  // lossless: the same model
  Result<SimResult> f32 = Run(o);
  ASSERT_OK(f32);
  EXPECT_EQ(f32->final_model_sha256, plain->final_model_sha256);
  o.codec = "int8";
  Result<SimResult> int8 = Run(o);
  ASSERT_OK(int8);
  const ModelState model = *InitModel("mlp", 0);
  const int64_t encoded = static_cast<int64_t>((*MakeCodec("int8"))->EncodedSize(model));
  EXPECT_EQ(int8->rounds.back().bytes_up, 4 * encoded);  // two rounds of two updates
  EXPECT_LT(encoded * 3, static_cast<int64_t>(model.num_bytes()));
  // Every weight moved by 0.01 per round: int8's steps (absmax / 127 per chunk) keep it close.
  EXPECT_NEAR(MeanDrift(*int8, o.seed), 0.02, 1e-4);
  o.codec = "zip";
  EXPECT_THAT(Run(o).status(), ::plexus::testing::StatusIs(StatusCode::kInvalidArgument, "--codec: unknown codec"));
}

TEST_F(SimRunnerTest, DownloadsAreCompressedAndClientsTrainFromWhatTheyRebuild) {
  SimOptions o = TwoSpeeds("sync", 2);
  o.download_codec = "int8";
  Result<SimResult> int8 = Run(o);
  ASSERT_OK(int8);
  const ModelState model = *InitModel("mlp", 0);
  const int64_t encoded = static_cast<int64_t>((*MakeCodec("int8"))->EncodedSize(model));
  // Two rounds of two downloads: the whole model first, then the change from what each client
  // rebuilt; each the int8 size of the model.
  EXPECT_EQ(int8->rounds.back().bytes_down, 4 * encoded);
  // Every client adds 0.01 to what it starts from and uploads the difference, so the model
  // still moves by 0.01 per round although the clients started from int8 copies of it.
  EXPECT_NEAR(MeanDrift(*int8, o.seed), 0.02, 1e-4);
  o.download_codec = "topk:ratio=0.1";
  EXPECT_THAT(Run(o).status(), ::plexus::testing::StatusIs(StatusCode::kInvalidArgument, "downloads take"));
}

TEST_F(SimRunnerTest, TaskBudgetEndsTheRun) {
  SimOptions o = TwoSpeeds("async", 100);
  o.max_tasks = 3;
  Result<SimResult> r = Run(o);
  ASSERT_OK(r);
  EXPECT_EQ(r->tasks_trained, 3);
  EXPECT_EQ(r->rounds.size(), 3u);
}

TEST_F(SimRunnerTest, AttackersAreASeededFractionAndChangeTheResult) {
  SimOptions o = TwoSpeeds("sync", 2);
  o.clients = 10;
  o.sync.clients_per_round = 10;
  o.sync.min_clients = 10;
  Result<SimResult> clean = Run(o);
  o.attack = "signflip";
  o.attackers = 0.2;
  Result<SimResult> attacked = Run(o), again = Run(o);
  ASSERT_OK(clean);
  ASSERT_OK(attacked);
  EXPECT_EQ(attacked->attackers, 2);
  EXPECT_NE(attacked->final_model_sha256, clean->final_model_sha256);
  EXPECT_EQ(attacked->final_model_sha256, again->final_model_sha256);
  o.attackers = 1.0;
  EXPECT_THAT(Run(o).status(), ::plexus::testing::StatusIs(StatusCode::kInvalidArgument, "--attackers"));
}

TEST_F(SimRunnerTest, DroppedTasksCostTimeAndTheFederationStillFinishes) {
  SimOptions o = TwoSpeeds("async", 10);
  o.devices.dropout = 0.5;
  Result<SimResult> r = Run(o), again = Run(o);
  ASSERT_OK(r);
  EXPECT_EQ(r->rounds.size(), 10u);
  EXPECT_GT(r->tasks_dropped, 0);
  EXPECT_GE(r->tasks_trained, 10);  // async, buffer 1: every task reported publishes
  EXPECT_EQ(r->virtual_time_s, again->virtual_time_s);
  EXPECT_GT(r->virtual_time_s, Run(TwoSpeeds("async", 10))->virtual_time_s);
}

TEST_F(SimRunnerTest, TransfersAddLatencyAndBandwidthTime) {
  SimOptions o = TwoSpeeds("sync", 2);
  o.devices.latency_ms = 50;
  o.devices.down_mbps = 100;
  o.devices.up_mbps = 50;
  Result<SimResult> r = Run(o);
  ASSERT_OK(r);
  ASSERT_EQ(r->rounds.size(), 2u);
  const auto bytes = static_cast<int64_t>(InitModel(o.model, 0)->num_params() * sizeof(float));
  const double megabits = static_cast<double>(bytes) * 8 / 1e6;
  // The slow client's compute, two latencies, the download and the upload.
  const double task_s = (400 + 100 + megabits / 100 * 1000 + megabits / 50 * 1000) / 1000;
  EXPECT_NEAR(r->rounds[0].virtual_time_s, task_s, 1e-9);
  EXPECT_NEAR(r->rounds[1].virtual_time_s, 2 * task_s, 1e-9);
  EXPECT_EQ(r->rounds[1].bytes_down, 4 * bytes);
  EXPECT_EQ(r->rounds[1].bytes_up, 4 * bytes);
}

TEST_F(SimRunnerTest, ClientsBandwidthsSpreadDeterministically) {
  SimOptions o = TwoSpeeds("async", 6);
  o.devices.latency_ms = 10;
  o.devices.down_mbps = 10;
  o.devices.up_mbps = 10;
  Result<SimResult> alike = Run(o);
  o.devices.bandwidth_sigma = 1.0;
  Result<SimResult> spread = Run(o), again = Run(o);
  ASSERT_OK(alike);
  ASSERT_OK(spread);
  ASSERT_OK(again);
  EXPECT_NE(spread->virtual_time_s, alike->virtual_time_s);
  EXPECT_EQ(spread->virtual_time_s, again->virtual_time_s);
  EXPECT_EQ(spread->final_model_sha256, again->final_model_sha256);
}

TEST_F(SimRunnerTest, TheServersLinkIsSharedByEveryTransfer) {
  SimOptions o = TwoSpeeds("sync", 1);
  o.server_mbps = 10;
  Result<SimResult> r = Run(o);
  ASSERT_OK(r);
  ASSERT_EQ(r->rounds.size(), 1u);
  const double transfer_ms =
      static_cast<double>(InitModel(o.model, 0)->num_params() * sizeof(float)) * 8 / 1e6 / 10 * 1000;
  // Both downloads leave the server one after the other; the slow client's 400 ms of steps come
  // after its own download at the earliest, and its upload after them.
  EXPECT_GE(r->rounds[0].virtual_time_s, (400 + 2 * transfer_ms) / 1000 - 1e-9);
  o.server_mbps = -1;
  EXPECT_THAT(Run(o).status(), ::plexus::testing::StatusIs(StatusCode::kInvalidArgument, "--server-mbps"));
}

// A trainer whose deltas differ per task in ways float sums cannot add exactly (they depend on
// the task's seed), so that the order of summation shows in plain float FedAvg.
class SeededDeltaTrainer : public Trainer {
 public:
  Result<TrainOutcome> Train(const ModelState& start, const DatasetView& data, const TrainOptions& o) override {
    TrainOutcome out;
    out.weights = start;
    Rng rng(o.seed);
    for (float& x : out.weights.data()) x += static_cast<float>(rng.Normal() * 0.01);
    out.num_examples = static_cast<int64_t>(data.size());
    out.steps = o.local_steps;
    out.mean_loss = 1.0;
    return out;
  }
  Result<Evaluation> Evaluate(const ModelState&, const DatasetView&) override { return Evaluation{}; }
};

// Edge aggregators (issue 41): the same updates summed through 2 or 3 edges publish the flat
// server's model to the bit (exact sums), while the server receives one partial per edge and
// version and sends each version once per edge. Settings that cannot compose are refused.
TEST_F(SimRunnerTest, EdgesForwardPartialSumsAndPublishTheFlatServersModel) {
  SimOptions o = TwoSpeeds("sync", 3);
  o.clients = 24;
  o.sync.clients_per_round = 12;
  o.sync.min_clients = 12;
  o.sync.strategy = "fedavg_exact";
  SeededDeltaTrainer trainer;
  const auto run = [&](int64_t edges, const char* strategy = "fedavg_exact") {
    SimOptions with = o;
    with.edges = edges;
    with.sync.strategy = strategy;
    LocalTaskRunner runner(&trainer, &data_);
    return RunSimulation(with, data_, &runner, nullptr, nullptr);
  };
  // A server optimizer at the root over the edges' exact sums: the flat server's model too.
  Result<SimResult> adam_flat = run(0, "fedadam:exact=true,lr=0.05");
  Result<SimResult> adam_tree = run(3, "fedadam:exact=true,lr=0.05");
  ASSERT_OK(adam_flat);
  ASSERT_OK(adam_tree);
  EXPECT_EQ(adam_tree->final_model_sha256, adam_flat->final_model_sha256);
  Result<SimResult> flat = run(0);
  ASSERT_OK(flat);
  ASSERT_EQ(flat->rounds.size(), 3u);
  const auto model_bytes = static_cast<int64_t>(flat->final_model.num_bytes());
  EXPECT_EQ(flat->rounds.back().bytes_up, 36 * model_bytes);
  for (int64_t edges : {2, 3}) {
    Result<SimResult> tree = run(edges);
    ASSERT_OK(tree);
    ASSERT_EQ(tree->rounds.size(), 3u);
    EXPECT_EQ(tree->final_model_sha256, flat->final_model_sha256) << edges << " edges";
    EXPECT_EQ(tree->tasks_trained, flat->tasks_trained);
    // Each edge fetched each version at most once; partial sums are 8 bytes per value.
    EXPECT_LE(tree->rounds.back().bytes_down, 3 * edges * model_bytes);
    EXPECT_GE(tree->rounds.back().bytes_up, 3 * edges * 2 * model_bytes);  // one partial per edge and round at least
    EXPECT_LT(tree->rounds.back().bytes_up, flat->rounds.back().bytes_up);
  }
  o.edges = 2;
  o.sync.strategy = "fedavg";
  EXPECT_THAT(Run(o).status(), ::plexus::testing::StatusIs(StatusCode::kInvalidArgument, "exact=true"));
  o.sync.strategy = "fedavg_exact";
  o.mode = Mode::kSemiAsync;
  o.async.strategy = "fedavg_exact";
  EXPECT_THAT(Run(o).status(), ::plexus::testing::StatusIs(StatusCode::kInvalidArgument, "sync and async modes"));
}

// Edges under an asynchronous root (FedBuff with exact sums): each edge forwards its clients'
// updates on a version as one partial, which fills the root's buffer with all of them; every
// version takes a buffer's worth of client updates, the server receives partials (fewer bytes than
// flat) and sends each version to each edge at most once, and the same seed gives the same model.
// Central DP (dp_fedavg with seeded noise) through edges releases what the flat server does.
TEST_F(SimRunnerTest, EdgesUnderAnAsynchronousRootAndUnderCentralDp) {
  SimOptions o = TwoSpeeds("async", 4);
  o.clients = 24;
  o.async.buffer_size = 6;
  o.async.strategy = "fedavg_exact";
  SeededDeltaTrainer trainer;
  const auto run = [&](const SimOptions& with) {
    LocalTaskRunner runner(&trainer, &data_);
    return RunSimulation(with, data_, &runner, nullptr, nullptr);
  };
  Result<SimResult> flat = run(o);
  ASSERT_OK(flat);
  SimOptions tree_options = o;
  tree_options.edges = 3;
  Result<SimResult> tree = run(tree_options), again = run(tree_options);
  ASSERT_OK(tree);
  ASSERT_OK(again);
  ASSERT_EQ(tree->rounds.size(), 4u);
  EXPECT_EQ(tree->final_model_sha256, again->final_model_sha256);
  for (const SimRound& r : tree->rounds) EXPECT_GE(r.record.num_updates, 6) << "version " << r.record.model_version;
  const auto model_bytes = static_cast<int64_t>(flat->final_model.num_bytes());
  EXPECT_LE(tree->rounds.back().bytes_down, 4 * 3 * model_bytes);  // versions 0-3, once per edge
  EXPECT_LT(tree->rounds.back().bytes_up, flat->rounds.back().bytes_up);

  SimOptions dp = TwoSpeeds("sync", 3);
  dp.clients = 24;
  dp.sync.clients_per_round = 12;
  dp.sync.min_clients = 12;
  dp.sync.strategy = "dp_fedavg:clip=0.5,noise=1,expected=12,seed=5";
  Result<SimResult> dp_flat = run(dp);
  dp.edges = 3;
  Result<SimResult> dp_tree = run(dp);
  ASSERT_OK(dp_flat);
  ASSERT_OK(dp_tree);
  ASSERT_EQ(dp_tree->rounds.size(), 3u);
  ASSERT_EQ(dp_tree->final_model.num_params(), dp_flat->final_model.num_params());
  for (size_t i = 0; i < dp_flat->final_model.num_params(); i += 97) {
    EXPECT_NEAR(dp_tree->final_model.data()[i], dp_flat->final_model.data()[i], 1e-5) << "value " << i;
  }
  dp.sync.strategy = "dp_fedavg:clip=0.5,noise=1,expected=12,adaptive=true,seed=5";
  EXPECT_THAT(run(dp).status(), ::plexus::testing::StatusIs(StatusCode::kInvalidArgument, "central DP"));
}

TEST_F(SimRunnerTest, PopulationsLargerThanTheDataSampleWithReplacement) {
  SimOptions o = TwoSpeeds("sync", 3);
  o.clients = 5000;  // 100 examples: 50 sampled per client
  o.sync.clients_per_round = 20;
  o.sync.min_clients = 20;
  Result<SimResult> a = Run(o), b = Run(o);
  ASSERT_OK(a);
  ASSERT_OK(b);
  EXPECT_EQ(a->examples_per_client, 50);
  ASSERT_EQ(a->rounds.size(), 3u);
  EXPECT_EQ(a->rounds[0].record.num_examples, 20 * 50);
  EXPECT_EQ(a->final_model_sha256, b->final_model_sha256);
  EXPECT_EQ(a->tasks_trained, 60);  // idle clients were parked, not trained
}

TEST_F(SimRunnerTest, AvailabilityPeriodsAreDeterministicAndCostTime) {
  SimOptions o = TwoSpeeds("async", 20);
  o.clients = 10;
  o.devices.mean_on_s = 0.5;
  o.devices.mean_off_s = 0.5;
  Result<SimResult> a = Run(o), b = Run(o);
  ASSERT_OK(a);
  ASSERT_OK(b);
  EXPECT_EQ(a->rounds.size(), 20u);
  EXPECT_GT(a->tasks_dropped, 0);  // tasks cut short by an off period
  EXPECT_EQ(a->virtual_time_s, b->virtual_time_s);
  EXPECT_EQ(a->final_model_sha256, b->final_model_sha256);
}

// Records whether each training run saw flipped labels.
class LabelCheckingTrainer final : public Trainer {
 public:
  Result<TrainOutcome> Train(const ModelState& start, const DatasetView& data, const TrainOptions& o) override {
    if (data.label_map) {
      ++flipped;
      if (data.label_map[0] != 9 || data.label_map[9] != 0) return InternalError("not the flipped labels");
    }
    TrainOutcome out;
    out.weights = start;
    out.num_examples = static_cast<int64_t>(data.size());
    out.steps = o.local_steps;
    return out;
  }
  Result<Evaluation> Evaluate(const ModelState&, const DatasetView&) override { return Evaluation{}; }
  int flipped = 0;
};

TEST_F(SimRunnerTest, LabelFlippersTrainOnFlippedLabels) {
  SimOptions o = TwoSpeeds("sync", 2);
  o.clients = 10;
  o.sync.clients_per_round = 10;
  o.sync.min_clients = 10;
  o.attack = "labelflip";
  o.attackers = 0.3;
  LabelCheckingTrainer trainer;
  LocalTaskRunner runner(&trainer, &data_);
  Result<SimResult> r = RunSimulation(o, data_, &runner, nullptr, nullptr);
  ASSERT_OK(r);
  EXPECT_EQ(r->attackers, 3);
  EXPECT_EQ(trainer.flipped, 3 * 2);  // three attackers, two rounds
}

TEST(DeviceModelTest, NamedProfilesAndBadValues) {
  EXPECT_DOUBLE_EQ(DeviceModel::Profile("mobile")->dropout, 0.1);
  EXPECT_GT(DeviceModel::Profile("mobile")->mean_off_s, 0.0);
  EXPECT_GT(DeviceModel::Profile("heterogeneous")->speed_sigma, 0.0);
  EXPECT_EQ(DeviceModel::Profile("uniform")->down_mbps, 0.0);
  EXPECT_THAT(DeviceModel::Profile("tablet").status(),
              ::plexus::testing::StatusIs(StatusCode::kInvalidArgument, "known: uniform, heterogeneous, mobile"));
  DeviceModel s;
  s.dropout = 1.0;
  EXPECT_THAT(s.Validate(), ::plexus::testing::StatusIs(StatusCode::kInvalidArgument, "dropout"));
  s = DeviceModel{};
  s.mean_on_s = 10;
  EXPECT_THAT(s.Validate(), ::plexus::testing::StatusIs(StatusCode::kInvalidArgument, "mean-off-s"));
  s = DeviceModel{};
  s.up_mbps = -1;
  EXPECT_THAT(s.Validate(), ::plexus::testing::StatusIs(StatusCode::kInvalidArgument, "up-mbps"));
}

TEST(DeviceModelTest, TaskTimeIsDownloadComputeAndUpload) {
  DeviceModel d;
  d.task_overhead_ms = 50;
  d.latency_ms = 30;
  d.down_mbps = 8;
  d.up_mbps = 4;
  // 1,000,000 bytes = 8 Mbit: 1 s down, 2 s up; 10 steps of 20 ms; two latencies; the overhead.
  EXPECT_DOUBLE_EQ(d.TaskMs(10, 20.0, 1000000), 200 + 50 + 60 + 1000 + 2000);
  EXPECT_DOUBLE_EQ(d.TaskMs(10, 20.0, 1000000, 2.0), 200 + 50 + 60 + 500 + 1000);  // twice the bandwidth
  d.down_mbps = d.up_mbps = 0;                                                     // unlimited
  EXPECT_DOUBLE_EQ(d.TaskMs(10, 20.0, 1000000), 200 + 50 + 60);
}

TEST(DeviceModelTest, BandwidthFactorsAreLogNormalPerClient) {
  DeviceModel d;
  EXPECT_EQ(d.BandwidthFactor(5, 1), 1.0);  // no spread: every client alike
  d.bandwidth_sigma = 1.0;
  std::vector<double> f;
  for (size_t i = 0; i < 20001; ++i) f.push_back(d.BandwidthFactor(i, 3));
  EXPECT_EQ(f[7], d.BandwidthFactor(7, 3));
  EXPECT_NE(f[7], d.BandwidthFactor(7, 4));
  std::nth_element(f.begin(), f.begin() + 10000, f.end());
  EXPECT_NEAR(f[10000], 1.0, 0.05);  // the median
  d.bandwidth_sigma = 6;
  EXPECT_THAT(d.Validate(), ::plexus::testing::StatusIs(StatusCode::kInvalidArgument, "bandwidth-sigma"));
}

TEST(DeviceModelTest, LogNormalSpeedsHaveTheirMedianAndSpread) {
  DeviceModel d;
  d.ms_per_step = 20;
  d.speed_sigma = 0.5;
  std::vector<double> v = d.Assign(20001, 3);
  EXPECT_EQ(v, d.Assign(20001, 3));
  std::sort(v.begin(), v.end());
  EXPECT_NEAR(v[10000], 20.0, 0.5);                       // the median
  EXPECT_NEAR(v[16827] / v[10000], std::exp(0.5), 0.03);  // one sigma above (84.1st percentile)
}

TEST(DeviceModelTest, SpreadGeometricallyInASeededOrder) {
  DeviceModel s;
  s.ms_per_step = 10;
  s.speed_ratio = 4;
  std::vector<double> v = s.Assign(3, 7);
  EXPECT_EQ(v, s.Assign(3, 7));
  std::sort(v.begin(), v.end());
  EXPECT_DOUBLE_EQ(v[0], 10.0);
  EXPECT_DOUBLE_EQ(v[1], 20.0);
  EXPECT_DOUBLE_EQ(v[2], 40.0);
  s.speed_ratio = 0.5;
  EXPECT_THAT(s.Validate(), ::plexus::testing::StatusIs(StatusCode::kInvalidArgument, "speed-ratio"));
}

TEST(LocalTaskRunnerTest, TrainsAtFinishOnTheJobsDataAndLabels) {
  const Dataset data = Synthetic(20);
  StepCountingTrainer trainer;
  LocalTaskRunner runner(&trainer, &data);
  auto base = std::make_shared<const ModelState>(*InitModel("mlp", 1));
  TrainOptions options;
  options.local_steps = 7;
  ASSERT_OK(runner.Start(3, {base, {0, 1, 2, 3, 4}, false, options}));
  EXPECT_THAT(runner.Start(3, {base, {0}, false, options}), testing::StatusIs(StatusCode::kInternal, "started twice"));
  Result<TrainOutcome> out = runner.Finish(3);
  ASSERT_OK(out);
  EXPECT_EQ(out->num_examples, 5);
  EXPECT_EQ(out->steps, 7);
  EXPECT_FLOAT_EQ(out->weights.data()[0], base->data()[0] + 0.01f);
  EXPECT_THAT(runner.Finish(3), testing::StatusIs(StatusCode::kNotFound, "no training job 3"));
}

}  // namespace
}  // namespace plexus

namespace plexus {
namespace {

// Secure aggregation in the simulator: members run plexus client's session, some drop out at
// every stage; every client's update is +0.01 everywhere, so each published mean is 0.01 whoever
// was included, to within the rounding bound.
TEST_F(SimRunnerTest, SecureGroupsWithDropoutsPublishEveryRoundsMean) {
  SimOptions o = TwoSpeeds("sync", 3);
  o.clients = 12;
  o.sync.clients_per_round = 12;
  o.sync.min_clients = 6;
  o.sync.round_deadline_ms = 5000;
  o.sync.secagg = *SecAggSettings::Parse("clip=0.1");
  Result<SimResult> r = RunWithDropouts(o);
  ASSERT_OK(r);
  const SimResult::SecureAggregation& g = *r->secagg;
  EXPECT_GT(g.members_dropped, 0);
  int64_t included = 0;
  for (const SimRound& round : r->rounds) included += round.record.num_updates;
  // Finished: heard that the mean was published; a member that dropped at the unmask stage is in
  // the mean without hearing so.
  EXPECT_LE(g.members_done, included);
  EXPECT_GE(g.members_done + g.members_dropped, included);
  EXPECT_LT(included, 36) << "members that dropped before their masked update are not in a mean";
  EXPECT_GT(g.member_cpu_ms, 0.0);
  EXPECT_GT(g.key_bytes_per_member, 0.0);
  EXPECT_GT(g.server_call_ms_max, 0.0);
}

// FedBuff with secure groups: buffers of 4 in groups of 5, a quarter of the members dropping at
// some stage; each version is one group's mean (+0.01 everywhere, staleness weight 1).
TEST_F(SimRunnerTest, FedBuffSecureGroupsWithDropoutsPublishEachGroupsMean) {
  SimOptions o = TwoSpeeds("async", 3);
  o.clients = 12;
  o.async.buffer_size = 4;
  o.sync.secagg = *SecAggSettings::Parse("clip=0.1,spare=1");
  Result<SimResult> r = RunWithDropouts(o);
  ASSERT_OK(r);
  for (const SimRound& round : r->rounds) {
    EXPECT_GE(round.record.num_updates, 2) << "a group's threshold of members";
    EXPECT_LE(round.record.num_updates, 5) << "at most the group";
  }
}

TEST_F(SimRunnerTest, SecureAggregationRefusesWhatItCannotSimulate) {
  SimOptions o = TwoSpeeds("semiasync", 1);
  o.sync.secagg = *SecAggSettings::Parse("");
  EXPECT_THAT(o.Validate(), ::plexus::testing::StatusIs(StatusCode::kInvalidArgument, "semiasync"));
  o = TwoSpeeds("sync", 1);
  o.secagg_dropout = 0.1;
  EXPECT_THAT(o.Validate(), ::plexus::testing::StatusIs(StatusCode::kInvalidArgument, "needs --secagg"));
}

}  // namespace
}  // namespace plexus
