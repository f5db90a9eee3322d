// SyncEngine and AsyncEngine (FedBuff) with secure aggregation (SecureRound, SecureBuffers):
// members played by the test with the real member state machine (secagg::Member) and encoding,
// the engines in virtual time.
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "aggregators/registry.h"
#include "core/rng.h"
#include "privacy/gaussian_noise.h"
#include "privacy/secagg_crypto.h"
#include "server/coordinator/async_engine.h"
#include "server/coordinator/sync_engine.h"
#include "server/store/memory_store.h"
#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;
using Stage = secagg::Server::Stage;

constexpr size_t kValues = 40;

ModelState Initial() {
  ModelState m = *ModelState::Create({{"w", {kValues}}});
  for (size_t i = 0; i < kValues; ++i) m.data()[i] = 0.01f * static_cast<float>(i);
  return m;
}

SyncOptions SecureOptions(int64_t k) {
  SyncOptions o;
  o.rounds = 2;
  o.clients_per_round = k;
  o.min_clients = 3;
  o.round_deadline_ms = 10000;
  o.selection_wait_ms = 0;
  o.secagg = *SecAggSettings::Parse("clip=0.5,weight-cap=1000");
  return o;
}

// One client as the test plays it: its task, its member, its update.
struct Player {
  Task task;
  secagg::Setup setup;
  std::unique_ptr<secagg::Member> member;
  secagg::KeyAdvert advert;  // as sent
  std::vector<float> delta;
  int64_t examples = 0;
};

class SecureRoundTest : public ::testing::Test {
 protected:
  void Open(SyncOptions options) {
    auto e = SyncEngine::Open(options, Initial(), &store_, &clock_, nullptr, nullptr);
    ASSERT_OK(e);
    engine_ = std::move(e).value();
  }
  void OpenAsync(AsyncOptions options) {
    auto e = AsyncEngine::Open(options, Initial(), &store_, &clock_, nullptr, nullptr);
    ASSERT_OK(e);
    engine_ = std::move(e).value();
  }

  Result<secagg::View> Call(const std::string& client, const secagg::Call& call) {
    return engine_->SecureAggregation(client, players_.at(client).task.task_id, call);
  }
  secagg::View Query(const std::string& client) {
    Result<secagg::View> v = Call(client, secagg::Call{});
    EXPECT_OK(v);
    return v.ok() ? *v : secagg::View{};
  }

  // Joins the clients, hands each its task and its group's setup, and gives each an update.
  void Begin(const std::vector<std::string>& clients) {
    for (const std::string& c : clients) ASSERT_OK(engine_->Join({c, 100, "test"}));
    for (size_t i = 0; i < clients.size(); ++i) {
      Result<PollAnswer> a = engine_->Poll(clients[i]);
      ASSERT_OK(a);
      ASSERT_EQ(a->kind, PollAnswer::Kind::kTask) << clients[i];
      Take(clients[i], *a, i);
    }
  }
  // FedBuff: polls `clients` in order; each waits until the last fills the group, then all take
  // their tasks (the i-th client of the test being first_index + i).
  void FormGroup(const std::vector<std::string>& clients, size_t first_index) {
    for (size_t i = 0; i + 1 < clients.size(); ++i) {
      Result<PollAnswer> a = engine_->Poll(clients[i]);
      ASSERT_OK(a);
      EXPECT_EQ(a->kind, PollAnswer::Kind::kWait) << clients[i] << " got a task before its group was full";
    }
    for (size_t i = clients.size(); i-- > 0;) {
      Result<PollAnswer> a = engine_->Poll(clients[i]);
      ASSERT_OK(a);
      ASSERT_EQ(a->kind, PollAnswer::Kind::kTask) << clients[i];
      Take(clients[i], *a, first_index + i);
    }
  }
  // Client `c` (the i-th) takes its task and its group's setup, and an update.
  void Take(const std::string& c, const PollAnswer& a, size_t i) {
    Rng rng(7 + i);
    Player& p = players_[c];
    p.task = a.task;
    secagg::Call ask;
    ask.want_setup = true;
    Result<secagg::View> v = Call(c, ask);
    ASSERT_OK(v);
    ASSERT_TRUE(v->setup.has_value());
    p.setup = *v->setup;
    p.member = std::move(secagg::Member::Create(p.setup.params, p.setup.member)).value();
    p.examples = 100 + 150 * static_cast<int64_t>(i);  // unequal weights, one above the cap
    for (size_t j = 0; j < kValues; ++j) p.delta.push_back(static_cast<float>(rng.Uniform() - 0.5) * 1.2f);
  }
  void Advertise(const std::string& c) {
    secagg::Call call;
    call.kind = secagg::Call::Kind::kAdvert;
    call.advert = players_.at(c).advert = *players_.at(c).member->Advertise();
    ASSERT_OK(Call(c, call));
  }
  void Share(const std::string& c) {
    const secagg::View v = Query(c);
    ASSERT_EQ(v.stage, Stage::kShareKeys);
    secagg::Call call;
    call.kind = secagg::Call::Kind::kShares;
    call.shares = *players_.at(c).member->ShareKeys(v.adverts);
    ASSERT_OK(Call(c, call));
  }
  // A sync engine whose group is `clients` under central DP (clip 0.3, noise 0.8, seeded), the
  // members adding the noise if `distributed`, and the clients' tasks taken.
  void OpenWithDp(bool distributed, const std::vector<std::string>& clients) {
    SyncOptions o = SecureOptions(static_cast<int64_t>(clients.size()));
    o.secagg->l2_clip = 0.3;
    o.secagg->clip = distributed ? 2.0 : 0.3;
    o.secagg->weight_cap = 1;
    o.secagg->member_noise = distributed ? 0.8 : 0.0;
    o.strategy = std::string("dp_fedavg:clip=0.3,noise=0.8,expected=5,seed=11,summed=true") +
                 (distributed ? ",noised_by_members=true" : "");
    Open(o);
    Begin(clients);
  }
  // Client c's own noise generator (distributed DP); each call gives the same draws.
  static std::unique_ptr<GaussianNoise> MemberNoise(const std::string& c) {
    return MakeSeededGaussianNoise(1000 + static_cast<uint64_t>(c[0]));
  }
  // Sends the masked update in chunks of `chunk` values.
  void SendMasked(const std::string& c, size_t chunk = 16) {
    Player& p = players_.at(c);
    const secagg::View v = Query(c);
    ASSERT_EQ(v.stage, Stage::kMaskedInput);
    const secagg::WeightedEncoding enc = *secagg::WeightedEncoding::For(p.setup);
    const std::unique_ptr<GaussianNoise> noise = MemberNoise(c);  // used when the group asks for it
    const std::vector<uint32_t> encoded = *enc.Encode(p.delta, p.examples, Secret32{1, 2, 3}, nullptr, noise.get());
    const std::vector<uint32_t> masked = p.member->MaskInput(encoded, v.shares)->values;
    for (size_t offset = 0; offset < masked.size(); offset += chunk) {
      secagg::Call call;
      call.kind = secagg::Call::Kind::kMaskedChunk;
      call.offset = offset;
      call.values.assign(masked.begin() + offset, masked.begin() + std::min(masked.size(), offset + chunk));
      ASSERT_OK(Call(c, call));
    }
  }
  void Reveal(const std::string& c) {
    const secagg::View v = Query(c);
    ASSERT_EQ(v.stage, Stage::kUnmask);
    secagg::Call call;
    call.kind = secagg::Call::Kind::kRevealed;
    call.revealed = *players_.at(c).member->Unmask(v.unmask);
    ASSERT_OK(Call(c, call));
  }
  // Every member of `clients` takes part in every stage, in turn.
  void RunEveryStage(const std::vector<std::string>& clients) {
    for (const auto& c : clients) Advertise(c);
    for (const auto& c : clients) Share(c);
    for (const auto& c : clients) SendMasked(c);
    for (const auto& c : clients) Reveal(c);
  }

  // The weighted mean of the clipped deltas of `clients` (what FedAvg of them publishes), and
  // the engine's rounding bound for it.
  std::vector<double> ExpectedMean(const std::vector<std::string>& clients, double* bound) {
    std::vector<double> sum(kValues, 0.0);
    double weight = 0;
    for (const std::string& c : clients) {
      const Player& p = players_.at(c);
      const double w = std::min<double>(static_cast<double>(p.examples), 1000.0) / 1000.0;
      weight += w;
      for (size_t j = 0; j < kValues; ++j) sum[j] += w * std::clamp<double>(p.delta[j], -0.5, 0.5);
    }
    for (double& v : sum) v /= weight;
    const secagg::WeightedEncoding enc = *secagg::WeightedEncoding::For(players_.at(clients[0]).setup);
    *bound = enc.MeanBound(static_cast<int64_t>(clients.size()), weight * 0.999) + 1e-6;  // + float32 of the model
    return sum;
  }

  void ExpectPublished(const std::vector<std::string>& included) {
    double bound = 0;
    const std::vector<double> mean = ExpectedMean(included, &bound);
    const ModelState initial = Initial();
    ASSERT_EQ(engine_->model().version(), 1u);
    for (size_t j = 0; j < kValues; ++j) {
      EXPECT_NEAR(engine_->model().data()[j] - initial.data()[j], mean[j], bound) << "value " << j;
    }
    const RoundRecord& r = engine_->history().back();
    EXPECT_EQ(r.num_updates, static_cast<int64_t>(included.size()));
    ASSERT_EQ(r.merged.size(), included.size());
    for (size_t i = 0; i < included.size(); ++i) EXPECT_EQ(r.merged[i].client_id, included[i]);
  }

  ManualClock clock_;
  MemoryStore store_;
  std::unique_ptr<Engine> engine_;
  std::map<std::string, Player> players_;
};

TEST_F(SecureRoundTest, AGroupWhereEveryoneStaysPublishesTheWeightedMeanOfItsUpdates) {
  Open(SecureOptions(6));
  const std::vector<std::string> all = {"a", "b", "c", "d", "e", "f"};
  Begin(all);
  EXPECT_EQ(players_["a"].setup.params.degree, 5);  // 2·log2(6) rounds to 6, at most n − 1
  EXPECT_EQ(players_["a"].setup.params.threshold, 3);
  RunEveryStage(all);
  ExpectPublished(all);
  EXPECT_EQ(Query("a").stage, Stage::kDone) << "a member that asks after the round closed hears how it ended";
  EXPECT_EQ(clock_.NowMs(), 0) << "closed by its last message, not a deadline";
}

TEST_F(SecureRoundTest, MembersThatDropAtEveryStageLeaveTheMeanOfThoseWhoseUpdatesArrived) {
  // Each survivor's self seed needs `threshold` revealing neighbours: with four members gone, a
  // threshold of 3 out of 8 neighbours leaves room.
  SyncOptions o = SecureOptions(10);
  o.secagg = *SecAggSettings::Parse("clip=0.5,weight-cap=1000,threshold=3");
  o.min_clients = 4;  // a round of 3 could not meet the threshold
  Open(o);
  const std::vector<std::string> all = {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"};
  Begin(all);
  for (const auto& c : all) {
    if (c != "h") Advertise(c);  // h: gone before advertising
  }
  clock_.AdvanceMs(10000);
  ASSERT_OK(engine_->Tick());
  for (const auto& c : all) {
    if (c != "h" && c != "g") Share(c);  // g: gone after advertising
  }
  clock_.AdvanceMs(10000);
  ASSERT_OK(engine_->Tick());
  for (const auto& c : all) {
    if (c != "h" && c != "g" && c != "f") SendMasked(c);  // f: gone after sharing keys (its masks recovered)
  }
  clock_.AdvanceMs(10000);
  ASSERT_OK(engine_->Tick());
  for (const auto& c : all) {
    if (c != "h" && c != "g" && c != "f" && c != "e") Reveal(c);  // e: gone after its masked update
  }
  clock_.AdvanceMs(10000);
  ASSERT_OK(engine_->Tick());
  ExpectPublished({"a", "b", "c", "d", "e", "i", "j"});
  EXPECT_EQ(engine_->history().back().num_dropped, 3);
}

TEST_F(SecureRoundTest, AGroupBelowTheThresholdAbortsAndTheRoundStartsAgainWithANewGroup) {
  Open(SecureOptions(6));
  Begin({"a", "b", "c", "d", "e", "f"});
  Advertise("a");
  Advertise("b");
  clock_.AdvanceMs(10000);
  ASSERT_OK(engine_->Tick());
  EXPECT_EQ(engine_->model().version(), 0u) << "nothing half-applied";
  EXPECT_EQ(engine_->status().secure_rounds_aborted, 1);
  EXPECT_THAT(engine_->status().last_secure_abort, ::testing::HasSubstr("threshold"));
  EXPECT_EQ(Query("a").stage, Stage::kAborted);
  Result<PollAnswer> again = engine_->Poll("a");
  ASSERT_OK(again);
  ASSERT_EQ(again->kind, PollAnswer::Kind::kTask);
  EXPECT_NE(again->task.task_id, players_["a"].task.task_id) << "a new attempt, a new group";
}

TEST_F(SecureRoundTest, BadMessagesAreRefusedAndTheGroupCarriesOn) {
  Open(SecureOptions(4));
  const std::vector<std::string> all = {"a", "b", "c", "d"};
  Begin(all);
  for (const auto& c : all) Advertise(c);
  secagg::Call replay;
  replay.kind = secagg::Call::Kind::kAdvert;
  replay.advert = players_["a"].advert;
  EXPECT_THAT(Call("a", replay).status(), StatusIs(StatusCode::kFailedPrecondition, "late, early or replayed"))
      << "a stage that closed";
  for (const auto& c : all) Share(c);
  secagg::Call off;
  off.kind = secagg::Call::Kind::kMaskedChunk;
  off.offset = 5;
  off.values = {1, 2, 3};
  EXPECT_THAT(Call("a", off).status(), StatusIs(StatusCode::kFailedPrecondition, "resume from there"))
      << "a chunk not where the server is";
  off.offset = 0;
  off.values.assign(kValues + 2, 7);
  EXPECT_THAT(Call("a", off).status(), StatusIs(StatusCode::kInvalidArgument, "does not fit"))
      << "longer than the round's input";
  EXPECT_THAT(engine_->SecureAggregation("a", players_["b"].task.task_id, secagg::Call{}).status(),
              StatusIs(StatusCode::kPermissionDenied, "belongs to another client"));
  EXPECT_THAT(engine_->SecureAggregation("a", "no-such-task", secagg::Call{}).status(),
              StatusIs(StatusCode::kNotFound, "not in the open secure round"));
  Update clear;
  clear.client_id = "a";
  clear.task_id = players_["a"].task.task_id;
  clear.num_examples = 1;
  clear.delta = ModelState::ZerosLike(engine_->model());
  EXPECT_THAT(engine_->Submit(clear), StatusIs(StatusCode::kFailedPrecondition, "never in the clear"))
      << "no update in the clear";
  for (const auto& c : all) SendMasked(c, 7);
  for (const auto& c : all) Reveal(c);
  ExpectPublished(all);
}

TEST_F(SecureRoundTest, SettingsThatCannotWorkAreRefusedAtOpen) {
  SyncOptions o = SecureOptions(4);
  o.strategy = "median";
  EXPECT_THAT(SyncEngine::Open(o, Initial(), &store_, &clock_, nullptr, nullptr).status(),
              StatusIs(StatusCode::kInvalidArgument, "averaging"));
  o.strategy = "dp_fedavg:clip=1,noise=1,expected=4";  // clips each update: the mean is not enough
  EXPECT_THAT(SyncEngine::Open(o, Initial(), &store_, &clock_, nullptr, nullptr).status(),
              StatusIs(StatusCode::kInvalidArgument, "need each update"));
  o.strategy = "fedadam";  // a server optimizer steps from the mean
  EXPECT_OK(SyncEngine::Open(o, Initial(), &store_, &clock_, nullptr, nullptr));
  o = SecureOptions(4);
  o.min_clients = 2;
  EXPECT_THAT(SyncEngine::Open(o, Initial(), &store_, &clock_, nullptr, nullptr).status(),
              StatusIs(StatusCode::kInvalidArgument, "at least 3"));
  o = SecureOptions(4);
  o.overselect = 1.5;
  EXPECT_THAT(SyncEngine::Open(o, Initial(), &store_, &clock_, nullptr, nullptr).status(),
              StatusIs(StatusCode::kInvalidArgument, "over-selection"));
  EXPECT_THAT(SecAggSettings::Parse("degree=3").status(), StatusIs(StatusCode::kInvalidArgument, "must be even"));
  EXPECT_THAT(SecAggSettings::Parse("threshold=9,degree=4").status(),
              StatusIs(StatusCode::kInvalidArgument, "exceeds"));
  EXPECT_THAT(SecAggSettings::Parse("colour=red").status(), StatusIs(StatusCode::kInvalidArgument, "colour"));
}

}  // namespace
}  // namespace plexus

namespace plexus {
namespace {

TEST_F(SecureRoundTest, AMessageAfterItsStageClosedIsRefusedAndTheGroupCarriesOn) {
  Open(SecureOptions(5));
  const std::vector<std::string> all = {"a", "b", "c", "d", "e"};
  Begin(all);
  for (const auto& c : all) Advertise(c);
  for (const auto& c : {"a", "b", "c", "d"}) Share(c);
  const secagg::View late_view = Query("e");  // e's neighbours' keys, fetched in time
  ASSERT_EQ(late_view.stage, Stage::kShareKeys);
  clock_.AdvanceMs(10000);  // the share-keys stage closes at its deadline without e
  ASSERT_OK(engine_->Tick());
  secagg::Call late;
  late.kind = secagg::Call::Kind::kShares;
  late.shares = *players_["e"].member->ShareKeys(late_view.adverts);
  EXPECT_THAT(Call("e", late).status(), StatusIs(StatusCode::kFailedPrecondition, "late, early or replayed"));
  for (const auto& c : {"a", "b", "c", "d"}) SendMasked(c);
  for (const auto& c : {"a", "b", "c", "d"}) Reveal(c);
  ExpectPublished({"a", "b", "c", "d"});
}

TEST_F(SecureRoundTest, ARestartedServerStartsTheOpenRoundAgainWithANewGroup) {
  Open(SecureOptions(4));
  Begin({"a", "b", "c", "d"});
  for (const auto& c : {"a", "b", "c", "d"}) Advertise(c);
  const std::string before = players_["a"].task.task_id;
  engine_.reset();  // the server dies; its store stays
  Open(SecureOptions(4));
  for (const char* c : {"a", "b", "c", "d"}) ASSERT_OK(engine_->Join({c, 100, "test"}));
  EXPECT_THAT(engine_->SecureAggregation("a", before, secagg::Call{}).status(),
              StatusIs(StatusCode::kNotFound, "not in the open secure round"))
      << "the keys died with the process: the old group is gone";
  Result<PollAnswer> again = engine_->Poll("a");
  ASSERT_OK(again);
  ASSERT_EQ(again->kind, PollAnswer::Kind::kTask);
  EXPECT_NE(again->task.task_id, before);
  EXPECT_EQ(again->task.round, 1u);
}

// Central DP over secure groups: the members clip their deltas to L2 norm C themselves, the
// engine folds the group's sum into dp_fedavg (summed=true), which adds the noise. With the same
// seeded noise, the release equals dp_fedavg's over the same deltas in the clear, to within the
// encoding's rounding.
TEST_F(SecureRoundTest, CentralDpOverASecureGroupReleasesWhatDpFedAvgReleasesInTheClear) {
  const std::vector<std::string> all = {"a", "b", "c", "d", "e"};
  OpenWithDp(/*distributed=*/false, all);
  EXPECT_EQ(players_["a"].setup.l2_clip, 0.3) << "the members learn the clip from the group's setup";
  RunEveryStage(all);
  ASSERT_EQ(engine_->model().version(), 1u);

  std::unique_ptr<Aggregator> clear = *MakeAggregator("dp_fedavg:clip=0.3,noise=0.8,expected=5,seed=11", nullptr);
  ASSERT_OK(clear->Begin(Initial()));
  double largest_norm = 0;
  for (const auto& c : all) {
    Update u;
    u.client_id = c;
    u.task_id = players_[c].task.task_id;
    u.num_examples = players_[c].examples;
    u.delta = *ModelState::Create({{"w", {kValues}}});
    std::copy(players_[c].delta.begin(), players_[c].delta.end(), u.delta.data().begin());
    double squares = 0;
    for (float v : players_[c].delta) squares += static_cast<double>(v) * v;
    largest_norm = std::max(largest_norm, std::sqrt(squares));
    ASSERT_OK(clear->Fold(u));
  }
  ASSERT_GT(largest_norm, 0.3) << "the test's deltas must be clipped for the comparison to mean anything";
  const ModelState expected = *clear->Finalize();
  const secagg::WeightedEncoding enc = *secagg::WeightedEncoding::For(players_["a"].setup);
  const double bound = enc.MeanBound(5, 5.0) + 1e-6;  // the sum's rounding over the fixed denominator
  for (size_t j = 0; j < kValues; ++j) {
    EXPECT_NEAR(engine_->model().data()[j], expected.data()[j], bound) << "value " << j;
  }
  EXPECT_NE(engine_->model().data()[0], Initial().data()[0]);
}

// Distributed DP: the members add the noise (each N(0, (Z·C)²/t), t the group's threshold) and
// the server none; the release is the sum of the members' clipped, noised deltas over the fixed
// denominator, here rebuilt from the members' own generators.
TEST_F(SecureRoundTest, DistributedDpMembersAddTheNoiseAndTheServerNone) {
  const std::vector<std::string> all = {"a", "b", "c", "d", "e"};
  OpenWithDp(/*distributed=*/true, all);
  const secagg::Setup& setup = players_["a"].setup;
  EXPECT_NEAR(setup.noise_std, 0.8 * 0.3 / std::sqrt(static_cast<double>(setup.params.threshold)), 1e-12);
  RunEveryStage(all);
  ASSERT_EQ(engine_->model().version(), 1u);
  std::vector<double> sum(kValues, 0.0), clean(kValues, 0.0);
  for (const auto& c : all) {
    const std::vector<float>& d = players_[c].delta;
    double squares = 0;
    for (float v : d) squares += static_cast<double>(v) * v;
    const double scale = std::min(1.0, 0.3 / std::sqrt(squares));
    std::vector<double> values(kValues);
    for (size_t j = 0; j < kValues; ++j) values[j] = scale * d[j];
    for (size_t j = 0; j < kValues; ++j) clean[j] += values[j];
    ASSERT_OK(MemberNoise(c)->Add(values, setup.noise_std));
    for (size_t j = 0; j < kValues; ++j) sum[j] += std::clamp(values[j], -2.0, 2.0);
  }
  const secagg::WeightedEncoding enc = *secagg::WeightedEncoding::For(setup);
  const double bound = enc.MeanBound(5, 5.0) + 1e-6;
  double noise_seen = 0;
  for (size_t j = 0; j < kValues; ++j) {
    const double released = engine_->model().data()[j] - Initial().data()[j];
    EXPECT_NEAR(released, sum[j] / 5.0, bound) << "value " << j;
    noise_seen = std::max(noise_seen, std::abs(released - clean[j] / 5.0));
  }
  EXPECT_GT(noise_seen, 100 * bound) << "the members' noise is in the release";
}

TEST_F(SecureRoundTest, CentralDpOverSecureGroupsNeedsTheSummedStrategyAndTheReverse) {
  SyncOptions o = SecureOptions(4);
  o.secagg->l2_clip = 0.3;
  o.strategy = "fedavg";
  EXPECT_THAT(SyncEngine::Open(o, Initial(), &store_, &clock_, nullptr, nullptr).status(),
              StatusIs(StatusCode::kInvalidArgument, "summed=true"));
  o = SecureOptions(4);
  o.strategy = "dp_fedavg:clip=0.3,noise=0.8,expected=4,summed=true";
  EXPECT_THAT(SyncEngine::Open(o, Initial(), &store_, &clock_, nullptr, nullptr).status(),
              StatusIs(StatusCode::kInvalidArgument, "--dp central"));
  EXPECT_THAT(MakeAggregator("dp_fedavg:clip=0.3,noise=0.8,expected=4,summed=true,adaptive=true", nullptr).status(),
              StatusIs(StatusCode::kInvalidArgument, "fixed clip"));
  o = SecureOptions(4);
  o.secagg->l2_clip = 0.3;
  o.secagg->member_noise = 1;
  o.strategy = "dp_fedavg:clip=0.3,noise=1,expected=4,summed=true";  // would add noise again
  EXPECT_THAT(SyncEngine::Open(o, Initial(), &store_, &clock_, nullptr, nullptr).status(),
              StatusIs(StatusCode::kInvalidArgument, "noised_by_members=true"));
}

// ---- FedBuff: each buffer a secure group -------------------------------------------------------

AsyncOptions AsyncSecure(int64_t buffer_size) {
  AsyncOptions o;
  o.rounds = 3;
  o.buffer_size = buffer_size;
  o.server_lr = 1.0;
  o.staleness = "poly:a=0.5";  // s(tau) = (1 + tau)^-0.5
  o.secagg = *SecAggSettings::Parse("clip=0.5,weight-cap=1000,spare=1");
  return o;
}

TEST_F(SecureRoundTest, FedBuffBuffersAreSecureGroupsPublishedInTheOrderTheyEndWithTheirStaleness) {
  OpenAsync(AsyncSecure(4));  // groups of 4 + 1 spare
  const std::vector<std::string> first = {"a", "b", "c", "d", "e"}, second = {"f", "g", "h", "i", "j"};
  for (const auto* group : {&first, &second}) {
    for (const std::string& c : *group) ASSERT_OK(engine_->Join({c, 100, "test"}));
  }
  FormGroup(first, 0);
  FormGroup(second, 5);
  EXPECT_NE(players_["a"].setup.params.round, players_["f"].setup.params.round) << "each group its own binding";
  EXPECT_EQ(engine_->status().round_selected, 10);
  // Both groups exchange keys; their members then finish training in an order of their own,
  // the second group first, its members interleaved at random.
  for (const auto* group : {&first, &second}) {
    for (const std::string& c : *group) Advertise(c);
    for (const std::string& c : *group) Share(c);
  }
  std::vector<std::string> order = second;
  Rng(3).Shuffle(std::span<std::string>(order));
  for (const std::string& c : order) SendMasked(c);
  for (const std::string& c : order) Reveal(c);
  ASSERT_EQ(engine_->model().version(), 1u) << "the second group ended first: its mean is version 1";
  double bound = 0;
  std::vector<double> mean = ExpectedMean(second, &bound);
  const ModelState initial = Initial();
  std::vector<float> v1(engine_->model().data().begin(), engine_->model().data().end());
  for (size_t j = 0; j < kValues; ++j) EXPECT_NEAR(v1[j] - initial.data()[j], mean[j], bound) << "value " << j;

  for (const std::string& c : first) SendMasked(c);
  for (const std::string& c : first) Reveal(c);
  ASSERT_EQ(engine_->model().version(), 2u);
  // The first group trained on version 0 and is folded after version 1: one version stale.
  mean = ExpectedMean(first, &bound);
  const double s1 = 1.0 / std::sqrt(2.0);
  for (size_t j = 0; j < kValues; ++j) {
    EXPECT_NEAR(engine_->model().data()[j] - v1[j], s1 * mean[j], bound) << "value " << j;
  }
  const RoundRecord& r = engine_->history().back();
  ASSERT_EQ(r.merged.size(), first.size()) << "the version lists the group's members, not one 'secure' update";
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(r.merged[i].client_id, first[i]);
    EXPECT_EQ(r.merged[i].staleness, 1u);
  }
  EXPECT_EQ(Query("a").stage, Stage::kDone) << "a member of an ended group hears how it ended";

  // An update in the clear is refused: only groups' means go in.
  Update clear;
  clear.client_id = "a";
  clear.task_id = players_["a"].task.task_id;
  clear.num_examples = 1;
  clear.delta = ModelState::ZerosLike(engine_->model());
  EXPECT_THAT(engine_->Submit(clear), StatusIs(StatusCode::kFailedPrecondition, "never in the clear"));
}

TEST_F(SecureRoundTest, AFedBuffGroupThatAbortsPublishesNothingAndItsMembersFormTheNextGroup) {
  OpenAsync(AsyncSecure(2));  // groups of 3 (threshold 2): one advertiser alone is too few
  const std::vector<std::string> group = {"a", "b", "c"};
  for (const std::string& c : group) ASSERT_OK(engine_->Join({c, 100, "test"}));
  FormGroup(group, 0);
  Advertise("a");
  clock_.AdvanceMs(31000);  // the advertising stage's deadline (30 s)
  ASSERT_OK(engine_->Tick());
  EXPECT_EQ(engine_->model().version(), 0u) << "nothing half-applied";
  EXPECT_EQ(engine_->status().secure_rounds_aborted, 1);
  players_.clear();
  FormGroup(group, 0);
  RunEveryStage(group);
  EXPECT_EQ(engine_->model().version(), 1u);
}

TEST_F(SecureRoundTest, FedBuffGroupsRespectMaxConcurrencyAndARestartFormsNewGroups) {
  AsyncOptions o = AsyncSecure(2);  // groups of 3
  o.max_concurrency = 3;            // one group at a time
  OpenAsync(o);
  const std::vector<std::string> group = {"a", "b", "c"};
  for (const char* c : {"a", "b", "c", "d"}) ASSERT_OK(engine_->Join({c, 100, "test"}));
  FormGroup(group, 0);
  Result<PollAnswer> full = engine_->Poll("d");
  ASSERT_OK(full);
  EXPECT_EQ(full->kind, PollAnswer::Kind::kWait) << "three clients in a group: a fourth waits";
  Result<PollAnswer> again = engine_->Poll("a");  // a member still gets its task
  ASSERT_OK(again);
  EXPECT_EQ(again->kind, PollAnswer::Kind::kTask);
  EXPECT_EQ(again->task.task_id, players_["a"].task.task_id);
  for (const std::string& c : group) Advertise(c);

  const std::string before = players_["a"].task.task_id;
  engine_.reset();  // the server dies; its store stays, the group's keys die with it
  OpenAsync(o);
  for (const char* c : {"a", "b", "c", "d"}) ASSERT_OK(engine_->Join({c, 100, "test"}));
  EXPECT_THAT(engine_->SecureAggregation("a", before, secagg::Call{}).status(),
              StatusIs(StatusCode::kNotFound, "no open secure group"));
  players_.clear();
  FormGroup(group, 0);
  EXPECT_NE(players_["a"].task.task_id, before) << "a new group, with its own task ids";
  RunEveryStage(group);
  EXPECT_EQ(engine_->model().version(), 1u);
}

TEST_F(SecureRoundTest, FedBuffSettingsThatCannotWorkAreRefusedAtOpen) {
  AsyncOptions o = AsyncSecure(1);
  o.secagg = *SecAggSettings::Parse("spare=1");
  EXPECT_THAT(AsyncEngine::Open(o, Initial(), &store_, &clock_, nullptr, nullptr).status(),
              StatusIs(StatusCode::kInvalidArgument, "needs at least 3"));
  o = AsyncSecure(4);
  o.strategy = "median";
  EXPECT_THAT(AsyncEngine::Open(o, Initial(), &store_, &clock_, nullptr, nullptr).status(),
              StatusIs(StatusCode::kInvalidArgument, "each group's weighted mean"));
  o = AsyncSecure(4);
  o.semi_async = true;
  EXPECT_THAT(AsyncEngine::Open(o, Initial(), &store_, &clock_, nullptr, nullptr).status(),
              StatusIs(StatusCode::kInvalidArgument, "semiasync"));
}

}  // namespace
}  // namespace plexus
