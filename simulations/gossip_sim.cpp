#include "simulations/gossip_sim.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "compute/model_zoo.h"
#include "core/rng.h"
#include "crdt/contribution.h"
#include "crdt/crdt_replica.h"
#include "crdt/merkle_digest.h"
#include "crdt/signing.h"
#include "gossip/membership/membership.h"
#include "gossip/protocol/registry.h"
#include "gossip/protocol/topology.h"
#include "simulations/attack.h"
#include "simulations/client_data.h"
#include "simulations/event_network.h"
#include "simulations/oracle_view.h"
#include "simulations/swim_driver.h"

namespace plexus {

using gossip::Actions;
using gossip::Membership;
using gossip::MemberUpdate;
using gossip::Message;
using gossip::NodeId;
using gossip::Topology;

Status GossipSimOptions::Validate() const {
  if (nodes < 2) return InvalidArgumentError("--clients: a decentralized federation needs at least 2 nodes");
  if (rounds < 1) return InvalidArgumentError("--rounds must be positive");
  PLEXUS_ASSIGN_OR_RETURN(auto factory, gossip::MakeGossip(gossip, merge));
  const std::string spec = topology.empty() ? factory->default_topology() : topology;
  PLEXUS_RETURN_IF_ERROR(Topology::Parse(spec, static_cast<size_t>(nodes), seed).status());
  PLEXUS_RETURN_IF_ERROR(devices.Validate());
  PLEXUS_ASSIGN_OR_RETURN(AttackKind kind, ParseAttack(attack));
  if (!(attackers >= 0.0 && attackers < 1.0)) return InvalidArgumentError("--attackers must lie in [0, 1)");
  if (kind != AttackKind::kNone && std::llround(attackers * static_cast<double>(nodes)) >= nodes) {
    return InvalidArgumentError("--attackers leaves no honest node");
  }
  if (factory->mixes_by_weight_only() && kind != AttackKind::kNone && kind != AttackKind::kLabelFlip) {
    return InvalidArgumentError("--attack " + attack +
                                ": push-sum sends running totals, not models, so only labelflip applies to it");
  }
  if (factory->uses_replicas() && kind != AttackKind::kNone && kind != AttackKind::kLabelFlip) {
    return InvalidArgumentError(
        "--attack " + attack + ": CRDT gossip sends signed contributions, not models, so only labelflip applies to it");
  }
  if (kind == AttackKind::kLabelFlip && !train) return InvalidArgumentError("--attack labelflip needs training");
  if (!(churn_fraction >= 0.0 && churn_fraction < 1.0)) return InvalidArgumentError("--churn: FRACTION in [0, 1)");
  if (churn_fraction > 0 && churn_every < 1) return InvalidArgumentError("--churn: EVERY must be at least 1 round");
  if ((partition_at >= 0) != (heal_at >= 0)) {
    return InvalidArgumentError("--partition-at and --heal-at go together");
  }
  if (partition_at >= 0 && heal_at <= partition_at) {
    return InvalidArgumentError("--heal-at must come after --partition-at");
  }
  if (eval_nodes < 0) return InvalidArgumentError("--eval-nodes must not be negative");
  if (liveness != "auto" && liveness != "swim" && liveness != "oracle") {
    return InvalidArgumentError("--liveness: swim, oracle or auto, not '" + liveness + "'");
  }
  if (liveness == "swim" && nodes > kMaxSwimNodes) {
    return InvalidArgumentError("--liveness swim: every node holds every member, too much beyond " +
                                std::to_string(kMaxSwimNodes) + " nodes; use --liveness oracle");
  }
  if (task.batch_size < 1 || (task.local_steps < 1 && task.local_epochs < 1)) {
    return InvalidArgumentError("--batch-size and --local-steps or --local-epochs must be positive");
  }
  return Status::Ok();
}

namespace {

constexpr double kSwimTickMs = 100;    // a peer's tick
constexpr uint64_t kProbeBytes = 32;   // a ping or ack envelope, without rumours
constexpr uint64_t kRumourBytes = 24;  // one piggybacked member update (no address here)
constexpr double kStallMs = 600'000;   // no round completed for this long: the run has stalled

class GossipSim {
 public:
  GossipSim(const GossipSimOptions& o, const Dataset* train, TaskRunner* runner, ModelEvaluator* average_evaluator,
            ModelEvaluator* node_evaluator, std::optional<ClientData> data,
            std::unique_ptr<gossip::ProtocolFactory> factory, Topology topology,
            const std::function<void(const GossipRound&)>& on_round)
      : o_(o),
        n_(static_cast<size_t>(o.nodes)),
        train_(train),
        runner_(runner),
        average_evaluator_(average_evaluator),
        node_evaluator_(node_evaluator),
        data_(std::move(data)),
        factory_(std::move(factory)),
        peers_(std::move(topology)),
        on_round_(on_round),
        attack_spec_(*ParseAttackSpec(o.attack)),
        attack_(attack_spec_.kind),
        train_at_start_(attack_ == AttackKind::kIpm || attack_ == AttackKind::kAlie || attack_ == AttackKind::kMinMax),
        ms_per_step_(o.devices.Assign(n_, o.seed)),
        live_(n_ + 1, true),  // (slot n_: the server of semi-decentralized runs)
        incarnation_(n_ + 1, 0),
        jobs_(n_, 0),
        completed_(n_ + 1, 0),
        train_base_(n_ + 1) {
    for (size_t i = 0; i < n_; ++i) {
      const double f = o.devices.BandwidthFactor(i, o.seed);
      net_.AddNode({o.devices.latency_ms, o.devices.up_mbps * f, o.devices.down_mbps * f});
    }
    malicious_ = ChooseAttackers(attack_, o.attackers, n_, o.seed);
    malicious_.push_back(false);
    if (factory_->needs_server()) net_.AddNode({0.0, 0.0, 0.0});  // node n_: the server's link is unlimited
    alie_z_ = AlieZ(n_, static_cast<size_t>(std::count(malicious_.begin(), malicious_.end(), true)));
  }

  Result<GossipResult> Run() {
    start_ = std::chrono::steady_clock::now();
    result_.gossip = factory_->description();
    result_.merge = factory_->merge_description();
    result_.topology = peers_.topology().spec();
    result_.attackers = std::count(malicious_.begin(), malicious_.end(), true);
    PLEXUS_RETURN_IF_ERROR(MakeNodes());
    Recount();
    for (size_t i = 0; i < n_; ++i) {
      const auto node = static_cast<NodeId>(i);
      net_.After(0.0, [this, node] { Execute(node, nodes_[node]->Start(false)); });
      if (swim_) ScheduleTick(node);
    }
    net_.Run();
    PLEXUS_RETURN_IF_ERROR(failure_);
    if (next_report_ <= o_.rounds) {
      return InternalError("gossip simulation: the nodes stopped before round " + std::to_string(next_report_) +
                           " (no event left)");
    }
    result_.wall_time_s = Elapsed();
    result_.virtual_time_s = net_.now_ms() / 1000.0;
    if (!result_.rounds.empty()) {
      const GossipRound& last = result_.rounds.back();
      result_.final_test_accuracy = last.test_accuracy;
      result_.mean_node_accuracy = last.mean_node_accuracy;
      result_.min_node_accuracy = last.min_node_accuracy;
      result_.consensus_distance = last.consensus_distance;
      result_.bytes_sent_per_node = last.bytes_sent_per_node;
      result_.rounds_completed = last.round;
    }
    result_.messages_lost = lost_;
    result_.swim = swim_ != nullptr;
    if (swim_) {
      const Membership::Counters c = swim_->counters();
      result_.suspicions = static_cast<int64_t>(c.suspicions);
      result_.deaths = static_cast<int64_t>(c.deaths);
      result_.refutations = static_cast<int64_t>(c.refutations);
    }
    return std::move(result_);
  }

 private:
  double Elapsed() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

  Status MakeNodes() {
    std::shared_ptr<const ModelState> shared = o_.initial;
    if (!shared) {
      PLEXUS_ASSIGN_OR_RETURN(ModelState initial, InitModel(o_.model, o_.seed));
      shared = std::make_shared<const ModelState>(std::move(initial));
    }
    if (Status s = factory_->CheckModel(*shared); !s.ok()) return InvalidArgumentError("--gossip: " + s.message());
    if (factory_->uses_replicas()) {
      // CRDT gossip: every node signs its contributions; the keys are derived from the seed
      // (reproducible runs) and every node knows every other's.
      keys_.reserve(n_);
      for (size_t i = 0; i < n_; ++i) {
        PLEXUS_ASSIGN_OR_RETURN(
            SigningKey key,
            SigningKey::FromSeed(
                Sha256Hex("plexus.gossip-sim.key/" + std::to_string(o_.seed) + "/" + std::to_string(i)).substr(0, 32)));
        author_keys_.Add("peer-" + std::to_string(i), key.public_key());
        keys_.push_back(std::move(key));
      }
    }
    if (o_.swim()) {
      swim_ = std::make_unique<SwimDriver>(
          n_, &peers_.topology(), &net_, o_.seed,
          SwimDriver::Hooks{[this](NodeId i) { return static_cast<bool>(live_[i]); },
                            [this](NodeId j, const Membership::Changes& c) { MembershipChanged(j, c); },
                            [this] { ++lost_; }});
    }
    for (size_t i = 0; i < n_; ++i) {
      const gossip::PeerView* view = swim_ ? swim_->view(static_cast<NodeId>(i)) : &peers_;
      gossip::NodeContext ctx{static_cast<NodeId>(i),           view, o_.seed,
                              static_cast<uint64_t>(o_.rounds), n_,   static_cast<NodeId>(n_)};
      if (!keys_.empty()) {
        ctx.signing_key = &keys_[i];
        ctx.author_keys = &author_keys_;
      }
      std::shared_ptr<const ModelState> start = shared;
      if (!o_.train && !o_.initial) {  // nothing will be trained: start the nodes apart, to watch them agree
        PLEXUS_ASSIGN_OR_RETURN(ModelState own, InitModel(o_.model, o_.seed + 1 + i));
        start = std::make_shared<const ModelState>(std::move(own));
      }
      nodes_.push_back(factory_->MakeNode(ctx, std::move(start)));
    }
    // The server of semi-decentralized runs is no SWIM member (a `plexus server` is not): it
    // keeps the oracle's view.
    if (factory_->needs_server()) {
      nodes_.push_back(factory_->MakeServer(
          {static_cast<NodeId>(n_), &peers_, o_.seed, static_cast<uint64_t>(o_.rounds), n_, static_cast<NodeId>(n_)}));
    }
    model_bytes_ = shared->num_bytes();
    pull_queue_.resize(n_);
    pulling_.assign(n_, false);
    return Status::Ok();
  }

  // Carries out what node i asked for, then measures every round all live nodes completed.
  void Execute(NodeId i, Actions a) {
    ++depth_;
    std::shared_ptr<const ModelState> crafted_for, crafted;
    for (Actions::Send& s : a.sends) {
      if (malicious_[i] && s.message.kind == Message::Kind::kModel && s.message.model) {
        if (s.message.model != crafted_for) {  // one crafted model per batch of sends
          crafted_for = s.message.model;
          crafted = Craft(i, *s.message.model, s.message.round);
        }
        s.message.model = crafted;
      }
      const uint64_t bytes = s.message.bytes();
      if (i < n_) bytes_sent_ += bytes;  // what the nodes send (a server's answers are not counted)
      const NodeId to = s.to;
      // Between SWIM members every message carries rumours, as a peer's envelopes do.
      std::vector<MemberUpdate> rumours;
      if (swim_ && i < n_ && to < n_) rumours = swim_->Piggyback(i);
      const bool sent = net_.Send(i, to, bytes + SwimDriver::kRumourBytes * rumours.size(),
                                  [this, i, to, m = std::move(s.message), rumours = std::move(rumours)] {
                                    if (!live_[to]) {
                                      ++lost_;
                                      return;
                                    }
                                    if (!rumours.empty()) swim_->Hear(to, rumours);
                                    Execute(to, nodes_[to]->OnMessage(i, m));
                                  });
      if (!sent) ++lost_;
    }
    for (const Actions::Timer& t : a.timers) {
      net_.After(t.delay_ms, [this, i, id = t.id, inc = incarnation_[i]] {
        if (live_[i] && incarnation_[i] == inc) Execute(i, nodes_[i]->OnTimer(id));
      });
    }
    for (const Actions::Sync& s : a.syncs) Pull(i, s.from, s.round);
    // A node that has completed the run's rounds trains no more, as a peer finishes then: without
    // this, nodes that stopped waiting for anyone (their neighbours gone) and trained in no time
    // (--train none) raced through rounds at one instant of virtual time and starved the run.
    if (a.train && live_[i] && nodes_[i]->rounds_completed() < static_cast<uint64_t>(o_.rounds)) StartTraining(i);
    Track(i);
    --depth_;
    if (depth_ == 0) ReportDueRounds();
  }

  // CRDT gossip: node i pulls from `from`'s replica of `round`. As a real peer does
  // (gossip/node/crdt_pulls.h), a node runs one pull at a time and queues the others (one per peer
  // at a time): each then starts from what the node holds by then, so a model reaches it once,
  // not once from every peer that has it. The entries i lacks travel from `from` to i, charged
  // their delta's bytes (streaming DiLoCo's are one fragment's) plus 32 bytes per digest node
  // compared; on arrival i joins what `from`'s replica held when the pull started (what a real
  // pull's digest questions found), never more than was charged.
  void Pull(NodeId i, NodeId from, uint64_t round) {
    if (!queued_pulls_.insert((static_cast<uint64_t>(i) << 32) | from).second) return;
    pull_queue_[i].push_back({from, round});
    if (!pulling_[i]) StartNextPull(i);
  }

  void StartNextPull(NodeId i) {
    while (!pulling_[i] && !pull_queue_[i].empty()) {
      const auto [from, round] = pull_queue_[i].front();
      pull_queue_[i].pop_front();
      queued_pulls_.erase((static_cast<uint64_t>(i) << 32) | from);
      if (!live_[i]) continue;
      const CrdtReplica* theirs = live_[from] ? nodes_[from]->replica(round) : nullptr;
      const CrdtReplica* mine = nodes_[i]->replica(round);
      uint64_t bytes = Message::kHeaderBytes;
      // What the peer held when the pull started: its set (the contributions are content-addressed
      // and immutable, so its store supplies them on arrival).
      std::shared_ptr<const ContributionSet> pulled;
      if (theirs && mine) {
        pulled = std::make_shared<const ContributionSet>(theirs->set());
        size_t hashes = 0;
        for (const std::string& entry :
             MissingFrom(MerkleDigest(mine->set().Entries()), MerkleDigest(theirs->set().Entries()), &hashes)) {
          if (entry.empty() || entry[0] != '+') continue;  // a tombstone: a few bytes
          const Contribution* c = theirs->Find(entry.substr(entry.rfind('/') + 1));
          bytes += c != nullptr ? c->WireBytes() : model_bytes_;
        }
        bytes += 32 * hashes;
      }
      if (from < n_) bytes_sent_ += bytes;
      pulling_[i] = net_.Send(from, i, bytes, [this, i, from, round, pulled, inc = incarnation_[i]] {
        pulling_[i] = false;
        if (live_[i] && incarnation_[i] == inc) {
          const CrdtReplica* mine = nodes_[i]->replica(round);
          const CrdtReplica* theirs = live_[from] ? nodes_[from]->replica(round) : nullptr;
          if (!pulled || !mine || !theirs) {
            Execute(i, nodes_[i]->OnSynced(from, round, nullptr));
          } else {
            CrdtReplica copy(*mine);
            const bool ok = copy.Restore(*pulled, theirs->contributions()).ok();
            Execute(i, nodes_[i]->OnSynced(from, round, ok ? &copy : nullptr));
          }
        }
        StartNextPull(i);
      });
      if (!pulling_[i]) ++lost_;
    }
  }

  void StartTraining(NodeId i) {
    std::shared_ptr<const ModelState> base = nodes_[i]->model();
    if (malicious_[i]) train_base_[i] = base;  // what its crafted models start from
    const uint64_t inc = incarnation_[i];
    if (!o_.train) {
      net_.After(0.0, [this, i, inc, base] {
        if (live_[i] && incarnation_[i] == inc) Execute(i, nodes_[i]->OnTrained(ModelState(*base)));
      });
      return;
    }
    const uint64_t key = (static_cast<uint64_t>(i) << 32) | jobs_[i]++;
    const int64_t steps = Steps(i);
    const uint64_t batch_seed = Rng::Derive(o_.seed ^ (0x61ULL << 56), key).NextU64();
    TrainOptions options = TrainOptionsFor(o_.task, batch_seed);
    if (options.optimizer == "adamw") options.optimizer_state = &optimizer_states_[i];  // the node's own moments
    Status s = runner_->Start(
        key, {base, data_->Indices(i), malicious_[i] && attack_ == AttackKind::kLabelFlip, std::move(options)});
    if (!s.ok()) return Fail(s);
    std::shared_ptr<Result<TrainOutcome>> early;
    if (train_at_start_) early = std::make_shared<Result<TrainOutcome>>(Finish(i, key, *base));
    const double ms = static_cast<double>(steps) * ms_per_step_[i] + static_cast<double>(o_.devices.task_overhead_ms);
    net_.After(ms, [this, i, inc, key, base, early] {
      Result<TrainOutcome> out = early ? std::move(*early) : Finish(i, key, *base);
      if (!out.ok() && out.status().code() != StatusCode::kAborted) return Fail(out.status());
      if (!live_[i] || incarnation_[i] != inc) return;  // the node left meanwhile
      // Diverged training (Aborted) is worthless: the node goes on with the model it had.
      Execute(i, nodes_[i]->OnTrained(out.ok() ? std::move(out->weights) : ModelState(*base)));
    });
  }

  int64_t Steps(NodeId i) const { return o_.task.StepsFor(data_->examples(i)); }

  // Finishes job `key` and feeds the honest statistics omniscient attackers read.
  Result<TrainOutcome> Finish(NodeId i, uint64_t key, const ModelState& base) {
    Result<TrainOutcome> out = runner_->Finish(key);
    if (!out.ok()) return out;
    ++result_.trainings;
    const uint64_t round = nodes_[i]->rounds_completed();
    if (!malicious_[i]) {
      auto& [sum, count] = train_loss_[round];
      sum += out->mean_loss;
      ++count;
    }
    if (train_at_start_ && !malicious_[i]) {
      ModelState delta = out->weights;
      delta.Subtract(base);
      honest_.try_emplace(round, /*keep_updates=*/attack_ == AttackKind::kMinMax).first->second.Add(delta.data());
      while (honest_.size() > 8) honest_.erase(honest_.begin());
    }
    return out;
  }

  // What attacker i sends instead of `trained`: its round's start model plus the attack's delta.
  std::shared_ptr<const ModelState> Craft(NodeId i, const ModelState& trained, uint64_t round) {
    const ModelState& base = train_base_[i] ? *train_base_[i] : trained;
    ModelState delta = trained;
    delta.Subtract(base);
    Rng rng = Rng::Derive(o_.seed ^ 0xa77acULL, (static_cast<uint64_t>(i) << 32) | round);
    ApplyAttack(attack_spec_, honest_[round], alie_z_, rng, delta);
    ModelState out = base;
    std::span<float> o = out.data();
    std::span<const float> d = delta.data();
    for (size_t k = 0; k < o.size(); ++k) o[k] += d[k];
    return std::make_shared<const ModelState>(std::move(out));
  }

  void Fail(const Status& s) {
    if (failure_.ok()) failure_ = s;
    net_.Stop();
  }

  // Keeps `behind_`, the live nodes that have not completed round next_report_, current.
  void Track(NodeId i) {
    const uint64_t now = nodes_[i]->rounds_completed();
    const uint64_t next = static_cast<uint64_t>(next_report_);
    if (live_[i] && completed_[i] < next && now >= next) --behind_;
    if (now > completed_[i]) last_progress_ms_ = net_.now_ms();
    completed_[i] = now;
  }

  void Recount() {
    behind_ = 0;
    for (size_t i = 0; i < n_; ++i) {
      if (live_[i] && completed_[i] < static_cast<uint64_t>(next_report_)) ++behind_;
    }
  }

  void ReportDueRounds() {
    if (reporting_ || !failure_.ok()) return;
    reporting_ = true;
    while (behind_ == 0 && next_report_ <= o_.rounds && failure_.ok()) {
      Status s = Report(next_report_);
      if (!s.ok()) Fail(s);
      ++next_report_;
      if (next_report_ > o_.rounds) {
        net_.Stop();
        break;
      }
      World(next_report_ - 1);
      Recount();
    }
    reporting_ = false;
  }

  // Churn and partitions, after round r was measured.
  void World(int64_t r) {
    if (o_.partition_at >= 0 && r == o_.partition_at) {
      std::vector<uint32_t> group(n_);
      Rng rng = Rng::Derive(o_.seed, 0x9a7717ULL);
      for (size_t i = 0; i < n_; ++i) group[i] = static_cast<uint32_t>(i % 2);
      rng.Shuffle(std::span<uint32_t>(group));
      if (factory_->needs_server()) group.push_back(0);  // the server stays with the first half
      net_.Partition(std::move(group));
      partitioned_ = true;
    }
    if (o_.heal_at >= 0 && r == o_.heal_at) {
      net_.Heal();
      partitioned_ = false;
    }
    if (o_.churn_fraction > 0 && r > 0 && r % o_.churn_every == 0) {
      std::vector<NodeId> back = std::move(away_);
      away_.clear();
      for (NodeId i : back) Rejoin(i);
      std::vector<NodeId> candidates;
      for (NodeId i = 0; i < n_; ++i) {
        if (live_[i] && std::find(back.begin(), back.end(), i) == back.end()) candidates.push_back(i);
      }
      Rng rng = Rng::Derive(o_.seed ^ 0xc4a7ULL, static_cast<uint64_t>(r));
      rng.Shuffle(std::span<NodeId>(candidates));
      const auto leaving = std::min(candidates.size(), static_cast<size_t>(std::llround(o_.churn_fraction * n_)));
      for (size_t k = 0; k < leaving; ++k) Depart(candidates[k]);
    }
  }

  void Depart(NodeId i) {
    if (swim_) {  // a crash: no goodbye, the others' SWIM must find out
      live_[i] = false;
      ++incarnation_[i];
      peers_.SetLive(i, false);
      away_.push_back(i);
      return;
    }
    Actions a = nodes_[i]->Leave();
    Execute(i, std::move(a));  // the goodbye messages leave before the node goes
    live_[i] = false;
    ++incarnation_[i];
    peers_.SetLive(i, false);
    away_.push_back(i);
    // Whoever waits for it stops waiting.
    std::vector<NodeId> out;
    peers_.topology().kind() == Topology::Kind::kComplete ? peers_.OutNeighbours(i, completed_[i], &out)
                                                          : peers_.topology().Out(i, completed_[i], &out);
    for (NodeId j : out) {
      if (live_[j]) Execute(j, nodes_[j]->OnPeerLeft(i));
    }
  }

  void Rejoin(NodeId i) {
    live_[i] = true;
    ++incarnation_[i];
    peers_.SetLive(i, true);
    if (swim_) {
      swim_->Restart(i);
      ScheduleTick(i);
    }
    Execute(i, nodes_[i]->Start(true));
  }

  Status Report(int64_t r) {
    std::vector<NodeId> honest;
    for (NodeId i = 0; i < n_; ++i) {
      if (live_[i] && !malicious_[i]) honest.push_back(i);
    }
    GossipRound g;
    g.round = r;
    g.live_nodes =
        static_cast<int64_t>(std::count(live_.begin(), live_.begin() + static_cast<std::ptrdiff_t>(n_), true));
    g.partitioned = partitioned_;
    if (honest.empty()) return InternalError("gossip simulation: no honest node is live at round " + std::to_string(r));
    // The average model of the live honest nodes, and how far they are from it.
    const ModelState& layout = *nodes_[honest[0]]->model();
    std::vector<double> sum(layout.num_params(), 0.0);
    for (NodeId i : honest) {
      std::span<const float> x = nodes_[i]->model()->data();
      for (size_t k = 0; k < sum.size(); ++k) sum[k] += x[k];
    }
    ModelState average = ModelState::UninitializedLike(layout);
    std::span<float> avg = average.data();
    const double inv = 1.0 / static_cast<double>(honest.size());
    for (size_t k = 0; k < sum.size(); ++k) avg[k] = static_cast<float>(sum[k] * inv);
    double spread = 0.0;
    for (NodeId i : honest) {
      std::span<const float> x = nodes_[i]->model()->data();
      for (size_t k = 0; k < sum.size(); ++k) {
        const double d = static_cast<double>(x[k]) - avg[k];
        spread += d * d;
      }
    }
    g.consensus_distance = std::sqrt(spread * inv);
    if (average_evaluator_ && o_.train) {
      PLEXUS_ASSIGN_OR_RETURN(Evaluation e, average_evaluator_->Evaluate(average));
      g.test_accuracy = e.accuracy;
      g.test_loss = e.loss;
    }
    if (node_evaluator_ && o_.train && o_.eval_nodes > 0) {
      std::vector<NodeId> sample = honest;
      Rng rng = Rng::Derive(o_.seed ^ 0xe7a1ULL, static_cast<uint64_t>(r));
      rng.Shuffle(std::span<NodeId>(sample));
      sample.resize(std::min(sample.size(), static_cast<size_t>(o_.eval_nodes)));
      double total = 0.0, lowest = 1.0;
      for (NodeId i : sample) {
        PLEXUS_ASSIGN_OR_RETURN(Evaluation e, node_evaluator_->Evaluate(*nodes_[i]->model()));
        total += e.accuracy;
        lowest = std::min(lowest, e.accuracy);
      }
      g.mean_node_accuracy = total / static_cast<double>(sample.size());
      g.min_node_accuracy = lowest;
    }
    // Rounds are counted from 1: round r's training ran while the nodes had completed r - 1.
    if (auto it = train_loss_.find(static_cast<uint64_t>(r - 1)); it != train_loss_.end()) {
      g.mean_train_loss = it->second.first / static_cast<double>(it->second.second);
      train_loss_.erase(train_loss_.begin(), std::next(it));
    }
    g.bytes_sent_per_node = static_cast<double>(bytes_sent_) / static_cast<double>(n_);
    if (swim_) {
      const Membership::Counters c = swim_->counters();
      g.suspicions = static_cast<int64_t>(c.suspicions);
      g.deaths = static_cast<int64_t>(c.deaths);
      g.refutations = static_cast<int64_t>(c.refutations);
      g.membership_errors = swim_->WrongViews();
      g.membership_bytes_per_node = static_cast<double>(swim_->bytes()) / static_cast<double>(n_);
    }
    g.virtual_time_s = net_.now_ms() / 1000.0;
    g.wall_time_s = Elapsed();
    if (o_.partition_at >= 0 && r == o_.partition_at) pre_partition_distance_ = g.consensus_distance;
    if (o_.heal_at >= 0 && r > o_.heal_at && result_.rounds_to_recover < 0 &&
        g.consensus_distance <= pre_partition_distance_) {
      result_.rounds_to_recover = r - o_.heal_at;
    }
    result_.final_model = std::move(average);
    result_.final_model.set_version(static_cast<uint64_t>(r));
    result_.final_model_sha256 = result_.final_model.ContentSha256();
    result_.rounds.push_back(g);
    if (on_round_) on_round_(g);
    return Status::Ok();
  }

  // ---- SWIM: each node's ticks (SwimDriver does the rest) ------------------------------------

  void ScheduleTick(NodeId i) {
    net_.After(kSwimTickMs, [this, i, inc = incarnation_[i]] {
      if (!live_[i] || incarnation_[i] != inc || !failure_.ok()) return;
      if (net_.now_ms() - last_progress_ms_ > kStallMs) {
        return Fail(InternalError("gossip simulation: no node completed a round in " +
                                  std::to_string(static_cast<int64_t>(kStallMs / 1000)) +
                                  " virtual seconds (waiting for round " + std::to_string(next_report_) + ")"));
      }
      swim_->Tick(i);
      ScheduleTick(i);
    });
  }

  // What node j's membership changed goes to its protocol, as a peer's does.
  void MembershipChanged(NodeId j, const Membership::Changes& changes) {
    if (!live_[j]) return;
    for (NodeId n : changes.left) Execute(j, nodes_[j]->OnPeerLeft(n));
    for (NodeId n : changes.joined) Execute(j, nodes_[j]->OnPeerJoined(n));
  }

  const GossipSimOptions& o_;
  const size_t n_;
  const Dataset* const train_;
  TaskRunner* const runner_;
  ModelEvaluator* const average_evaluator_;
  ModelEvaluator* const node_evaluator_;
  const std::optional<ClientData> data_;
  std::unique_ptr<gossip::ProtocolFactory> factory_;
  OracleView peers_;
  const std::function<void(const GossipRound&)>& on_round_;
  const AttackSpec attack_spec_;
  const AttackKind attack_;
  const bool train_at_start_;
  const std::vector<double> ms_per_step_;
  std::vector<bool> malicious_;
  double alie_z_ = 0.0;

  EventNetwork net_;
  std::vector<SigningKey> keys_;  // CRDT gossip: each node's, by id
  AuthorKeys author_keys_;
  std::vector<std::unique_ptr<gossip::Protocol>> nodes_;
  std::vector<bool> live_;
  std::vector<uint64_t> incarnation_;  // bumped when a node leaves or rejoins: its old timers lapse
  std::vector<uint32_t> jobs_;         // training jobs started per node (runner keys)
  std::unordered_map<size_t, OptimizerState> optimizer_states_;  // per node, with --optimizer adamw
  std::vector<uint64_t> completed_;                              // rounds completed per node, as last seen
  std::vector<std::shared_ptr<const ModelState>> train_base_;    // what each attacker last trained from
  std::map<uint64_t, HonestStats> honest_;                       // by round, for omniscient attacks
  std::map<uint64_t, std::pair<double, int64_t>> train_loss_;    // by round: sum and count
  std::vector<NodeId> away_;
  size_t model_bytes_ = 0;
  uint64_t bytes_sent_ = 0;
  // CRDT pulls: each node's queue of (peer, round), which (node << 32 | peer) are queued, and
  // whether the node's one pull is on its way.
  std::vector<std::deque<std::pair<NodeId, uint64_t>>> pull_queue_;
  std::unordered_set<uint64_t> queued_pulls_;
  std::vector<bool> pulling_;
  int64_t lost_ = 0;
  int64_t next_report_ = 1;
  int64_t behind_ = 0;
  int depth_ = 0;
  bool reporting_ = false;
  bool partitioned_ = false;
  double pre_partition_distance_ = 0.0;
  Status failure_;
  GossipResult result_;
  std::unique_ptr<SwimDriver> swim_;  // null: the oracle
  double last_progress_ms_ = 0;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

Result<GossipResult> RunGossipSimulation(const GossipSimOptions& options, const Dataset* train, TaskRunner* runner,
                                         ModelEvaluator* average_evaluator, ModelEvaluator* node_evaluator,
                                         const std::function<void(const GossipRound&)>& on_round) {
  PLEXUS_RETURN_IF_ERROR(options.Validate());
  if (options.train && (train == nullptr || runner == nullptr)) {
    return InvalidArgumentError("gossip simulation: training needs a data set and a task runner");
  }
  PLEXUS_ASSIGN_OR_RETURN(std::unique_ptr<gossip::ProtocolFactory> factory,
                          gossip::MakeGossip(options.gossip, options.merge));
  const std::string spec = options.topology.empty() ? factory->default_topology() : options.topology;
  PLEXUS_ASSIGN_OR_RETURN(Topology topology, Topology::Parse(spec, static_cast<size_t>(options.nodes), options.seed));
  std::optional<ClientData> data;
  if (options.train) {
    PLEXUS_ASSIGN_OR_RETURN(ClientData d, ClientData::Make(train->labels, options.partition, options.nodes,
                                                           options.examples_per_client, options.seed));
    data.emplace(std::move(d));
  }
  GossipSim sim(options, train, runner, average_evaluator, node_evaluator, std::move(data), std::move(factory),
                std::move(topology), on_round);
  return sim.Run();
}

}  // namespace plexus
