// CrdtNode, the node of CRDT gossip: rounds of local training whose merge is a CRDT (crdt/crdt_replica.h), so that
// every node holding the same contributions computes the identical model, byte for byte, in
// whatever order and however often they arrived.
//   round t at node i: train from x_t; the trained model is a contribution (author peer-i,
//                      round t, its delta from the zero model), signed with i's key and added to
//                      i's replica of round t
//                      pull from every live peer's replica of round t what i's lacks (Merkle
//                      digests; Actions::syncs, carried out by the driver through a SyncPeer),
//                      again every interval_ms
//                      once the replica holds a contribution of every live node (in i's first
//                      round: of every node not known to be gone), i has pulled from each live
//                      peer since adding its own, and from every peer that left or died in the
//                      round since it left (or wait_ms passed):
//                      x_{t+1} = strategy(the round's contributions), from the zero model
// The strategy is --merge: any strategy of the aggregators registry (mean is fedavg; every
// contribution weighs one), run over the contributions in id order from the zero model, the one
// base every node shares whatever it started or restarted from, so the merged model depends on
// the set alone. (Sparsifying merges such as ties or dare act on whole models here, not on
// updates.) A node keeps the replicas of its last
// kKeptRounds rounds, for peers still completing them. Models travel through the replicas; the
// only messages are a rejoining node's request for a live peer's model and round, and the answer
// (the peer's merged model, which the rejoining node takes on trust like every round protocol's
// rejoin does), so that it continues in the others' round rather than holding them up.
// DiLoCo gossip (diloco.cpp) is the same node with an outer step: it overrides ContributionOf,
// NextModel and the answer to a rejoining peer; it may send its contributions in a codec's bytes
// (SetContributionCodec: int8 pseudo-gradients, DeMo's DCT components), whose decoding is the
// contribution, so that every node resolves the same values and relays the same bytes.
// Single-threaded, as every Protocol.
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "compression/codec.h"
#include "crdt/contribution.h"
#include "crdt/crdt_replica.h"
#include "gossip/protocol/protocol.h"

namespace plexus::gossip {

class CrdtNode : public Protocol {
 public:
  static constexpr uint64_t kKeptRounds = 3;
  static constexpr uint64_t kRoundMask = (uint64_t{1} << 56) - 1;
  enum TimerKind : uint64_t { kWaitTimer = 1, kPullTimer = 2, kRejoinTimer = 3 };
  static std::string AuthorOf(NodeId node) { return "peer-" + std::to_string(node); }

  CrdtNode(const NodeContext& ctx, std::shared_ptr<const ModelState> initial, std::string strategy, double wait_ms,
           double interval_ms)
      : ctx_(ctx),
        zero_(std::make_shared<const ModelState>(ModelState::ZerosLike(*initial))),
        model_(std::move(initial)),
        strategy_(std::move(strategy)),
        wait_ms_(wait_ms),
        interval_ms_(interval_ms),
        round_(ctx.start_round) {}

  // A rejoining (or late) node first asks a live peer for its model and round: the others are
  // further along and would otherwise wait for it round by round. Without an answer in wait_ms it
  // trains from its own.
  Actions Start(bool rejoining) override {
    left_ = false;
    first_round_ = round_;
    Actions a;
    if (rejoining) {
      for (NodeId j = 0; j < ctx_.nodes; ++j) {
        if (j != ctx_.self && ctx_.peers->IsLive(j)) return AskForModel(j);
      }
    }
    a.train = round_ < ctx_.total_rounds;
    return a;
  }

  Actions OnTrained(ModelState trained) override {
    if (left_ || waiting_ || round_ >= ctx_.total_rounds) return {};
    return Contribute(std::move(trained));
  }

  // Model requests of rejoining peers, and the answer to this node's own.
  Actions OnMessage(NodeId from, const Message& m) override {
    Actions a;
    if (m.kind == Message::Kind::kModelRequest && !left_) {
      a.sends.push_back({from, Message{Message::Kind::kModelReply, round_, model_, 0.0, 0}});
    } else if (m.kind == Message::Kind::kModelReply && catching_up_ && m.model) {
      catching_up_ = false;
      if (m.round > round_) {
        a.rounds_completed = static_cast<uint32_t>(std::min(m.round, ctx_.total_rounds) - round_);
        round_ = std::min(m.round, ctx_.total_rounds);
        model_ = m.model;
      }
      a.train = round_ < ctx_.total_rounds;
    }
    return a;
  }

  Actions OnTimer(uint64_t id) override {
    const uint64_t kind = id >> 56, round = id & kRoundMask;
    if (kind == kRejoinTimer) {
      if (!catching_up_ || left_) return {};
      catching_up_ = false;
      Actions a;
      a.train = round_ < ctx_.total_rounds;
      return a;
    }
    if (left_ || !waiting_ || round != round_) return {};
    if (kind == kWaitTimer) return Advance();
    Actions a = PullFromLive();
    a.Append(MaybeAdvance());
    return a;
  }

  Actions OnSynced(NodeId from, uint64_t round, const CrdtReplica* synced) override {
    auto it = replicas_.find(round);
    if (synced != nullptr && it != replicas_.end()) {
      // Join verifies every contribution it lacks again: a copy is trusted no more than a peer.
      if (it->second.Join(*synced).ok() && round == round_) pulled_.insert(from);
    }
    if (round == round_) departed_.erase(from);  // its last pull is over, whatever it brought
    if (left_ || !waiting_ || round != round_) return {};
    return MaybeAdvance();
  }

  // A peer that left (or died) may have contributed to this round before: it is pulled from once
  // more (a peer that finished lingers, answering), and every live peer again, since one of them
  // may hold its contribution; only then does the round go on without it.
  Actions OnPeerLeft(NodeId peer) override {
    if (left_ || peer == ctx_.self || peer >= ctx_.nodes) return {};
    departed_.insert(peer);
    gone_.insert(peer);
    if (!waiting_) return {};
    pulled_.clear();
    Actions a = PullFromLive();
    a.Append(MaybeAdvance());
    return a;
  }

  Actions OnPeerJoined(NodeId peer) override {
    gone_.erase(peer);
    return {};
  }

  Actions Leave() override {
    left_ = true;
    return {};
  }

  const CrdtReplica* replica(uint64_t round) const override {
    auto it = replicas_.find(round);
    return it == replicas_.end() ? nullptr : &it->second;
  }

  std::shared_ptr<const ModelState> contribution_layout(uint64_t round) const override { return ZeroOf(round); }
  std::string contribution_codec() const override { return codec_ ? codec_->spec() : ""; }

  std::shared_ptr<const ModelState> model() const override { return model_; }
  uint64_t rounds_completed() const override { return round_; }

 protected:
  // Asks `peer` for its model and round (and waits for the answer at most wait_ms, then trains
  // from its own).
  Actions AskForModel(NodeId peer) {
    Actions a;
    a.sends.push_back({peer, Message{Message::Kind::kModelRequest, round_, nullptr, 0.0, 0}});
    a.timers.push_back({TimerId(kRejoinTimer, round_), wait_ms_});
    catching_up_ = true;
    return a;
  }

  // The node's contribution of round_, trained to `trained`: added to its replica, then pulls
  // from every live peer until the round is complete.
  Actions Contribute(ModelState trained) {
    waiting_ = true;
    trained_ = std::make_shared<const ModelState>(trained);
    Contribution c;
    c.author = AuthorOf(ctx_.self);
    c.examples = 1;
    c.base_version = BaseTag();
    c.created_round = round_;
    c.delta = ContributionOf(std::move(trained));
    if (codec_) Encode(c);
    c.delta.set_version(0);
    CrdtReplica& mine = ReplicaOf(round_);
    // A contribution that cannot be signed or is refused (NaN after a diverged step) is left
    // out: the round goes on with the others'.
    if (ctx_.signing_key != nullptr && Sign(c, *ctx_.signing_key).ok()) (void)mine.Add(c);
    pulled_.clear();
    Actions a = PullFromLive();
    a.timers.push_back({TimerId(kWaitTimer, round_), wait_ms_});
    a.Append(MaybeAdvance());
    return a;
  }

  // The zero model of `round`'s contributions (the base they are deltas from and are resolved
  // on): the model's layout; a node that contributes part of the model gives that part's.
  virtual std::shared_ptr<const ModelState> ZeroOf(uint64_t /*round*/) const { return zero_; }
  // What a contribution records as its base (Contribution::base_version): the round.
  virtual uint64_t BaseTag() { return round_; }
  // The contribution of a round whose training ended at `trained`, as a delta from the zero
  // model: here the trained model itself.
  virtual ModelState ContributionOf(ModelState trained) { return trained; }
  // The next round's model from the resolved merge of the round's contributions: the merge
  // itself; with nothing live (every contribution refused), what the node trained.
  virtual std::shared_ptr<const ModelState> NextModel(Result<ModelState> merged) {
    return merged.ok() ? std::make_shared<const ModelState>(std::move(merged).value()) : trained_;
  }

  static uint64_t TimerId(uint64_t kind, uint64_t round) { return (kind << 56) | (round & kRoundMask); }

  // Contributions travel in `codec`'s bytes from now on (a codec with a residual keeps it here,
  // across rounds: DeMo's local momentum).
  void SetContributionCodec(std::shared_ptr<const Codec> codec) { codec_ = std::move(codec); }

  // c's delta through the codec: the bytes travel, their decoding is the delta (so the author
  // resolves what every other node will). Codecs that draw random numbers are seeded by node and
  // round.
  void Encode(Contribution& c) {
    ModelState* residual = nullptr;
    if (codec_->uses_residual()) {
      if (!residual_ || !residual_->CheckSameLayout(c.delta).ok()) {
        residual_ = std::make_unique<ModelState>(ModelState::ZerosLike(c.delta));
      }
      residual = residual_.get();
    }
    auto bytes = std::make_shared<const std::string>(
        codec_->Encode(c.delta, residual, (uint64_t{ctx_.self} << 40) ^ c.created_round));
    Result<ModelState> decoded = codec_->Decode(*bytes, c.delta);
    if (!decoded.ok()) return;  // its own bytes always decode; if not, the contribution stays float32
    c.delta = std::move(decoded).value();
    c.codec = codec_->spec();
    c.coded = std::move(bytes);
  }

  CrdtReplica& ReplicaOf(uint64_t round) {
    return replicas_.try_emplace(round, AuthorOf(ctx_.self), ctx_.author_keys).first->second;
  }

  // A pull from every live peer and every departed one not pulled from since, and the next in
  // interval_ms.
  Actions PullFromLive() {
    Actions a;
    for (NodeId j = 0; j < ctx_.nodes; ++j) {
      if (j != ctx_.self && (ctx_.peers->IsLive(j) || departed_.count(j))) a.syncs.push_back({j, round_});
    }
    a.timers.push_back({TimerId(kPullTimer, round_), interval_ms_});
    return a;
  }

  // The round is complete once the contribution of every live node is in (in the node's first
  // round, of every node not known to be gone), every live peer has been pulled from since this
  // node added its own (so that what they held then is in too), and every peer that left in the
  // round once after.
  Actions MaybeAdvance() {
    std::set<std::string> authors;
    const CrdtReplica& mine = ReplicaOf(round_);
    for (const std::string& id : mine.LiveIds()) {
      const Contribution* c = mine.Find(id);
      if (c != nullptr && c->created_round == round_) authors.insert(c->author);
    }
    for (NodeId j = 0; j < ctx_.nodes; ++j) {
      if (departed_.count(j)) return {};
      if (gone_.count(j)) continue;
      // Nodes not met yet are waited for in the node's first round only (peers started at about
      // the same time must not race ahead in separate groups); later, a node that never showed
      // up, or died before anyone heard of it, must not cost every round its timer.
      if (j != ctx_.self && !ctx_.peers->IsLive(j) && round_ > first_round_) continue;
      if (!authors.count(AuthorOf(j))) return {};
      if (j != ctx_.self && ctx_.peers->IsLive(j) && !pulled_.count(j)) return {};
    }
    return Advance();
  }

  Actions Advance() {
    model_ = NextModel(ReplicaOf(round_).Resolve(strategy_, *ZeroOf(round_)));
    waiting_ = false;
    departed_.clear();
    ++round_;
    while (!replicas_.empty() && replicas_.begin()->first + kKeptRounds < round_) replicas_.erase(replicas_.begin());
    Actions a = AfterRound();
    a.rounds_completed = 1;
    return a;
  }

  // What a node does once a round is complete: train the next one (if any is left).
  virtual Actions AfterRound() {
    Actions a;
    a.train = round_ < ctx_.total_rounds;
    return a;
  }

  const NodeContext ctx_;
  const std::shared_ptr<const ModelState> zero_;
  std::shared_ptr<const ModelState> model_, trained_;
  const std::string strategy_;
  const double wait_ms_, interval_ms_;
  uint64_t round_ = 0;
  bool waiting_ = false;  // trained this round, its contribution added, the merge not done
  bool left_ = false;
  bool catching_up_ = false;   // asked a peer for its model and round (rejoining), no answer yet
  uint64_t first_round_ = 0;   // the round the node started (or restarted) in
  std::set<NodeId> pulled_;    // peers pulled from this round since the node's own contribution
  std::set<NodeId> departed_;  // peers that left this round, their last pull not over yet
  std::set<NodeId> gone_;      // peers that left or died (until they rejoin)
  std::map<uint64_t, CrdtReplica> replicas_;
  std::shared_ptr<const Codec> codec_;    // null: contributions travel as float32
  std::unique_ptr<ModelState> residual_;  // the codec's error feedback, when it keeps one
};

}  // namespace plexus::gossip
