#include "gossip/protocol/round_gossip.h"

#include <algorithm>

namespace plexus::gossip {
namespace {

// Timer ids: 3 t for a round's wait, 3 k + 1 for a fetch, 3 t + 2 for a server's answer.
uint64_t WaitTimer(uint64_t round) { return 3 * round; }
uint64_t FetchTimer(uint64_t fetch) { return 3 * fetch + 1; }
uint64_t ServerTimer(uint64_t round) { return 3 * round + 2; }

}  // namespace

RoundGossip::RoundGossip(const NodeContext& ctx, std::shared_ptr<const ModelState> initial, NeighbourMerge* merge,
                         double wait_ms)
    : ctx_(ctx), rng_(Rng::Derive(ctx.seed, ctx.self)), merge_(merge), wait_ms_(wait_ms), model_(std::move(initial)) {}

uint32_t RoundGossip::LiveDegree() {
  ctx_.peers->OutNeighbours(ctx_.self, round_, &scratch_);
  return static_cast<uint32_t>(scratch_.size());
}

Actions RoundGossip::BeginTraining() {
  phase_ = Phase::kTraining;
  Actions a;
  a.train = true;
  return a;
}

Actions RoundGossip::Start(bool rejoining) {
  inbox_.clear();
  trained_.reset();
  if (rejoining) {
    ctx_.peers->SampleOutNeighbours(ctx_.self, round_, 1, rng_, &scratch_);
    if (!scratch_.empty()) {
      phase_ = Phase::kFetching;
      Actions a;
      a.sends.push_back({scratch_[0], Message{Message::Kind::kModelRequest, round_, nullptr, 0.0, 0}});
      a.timers.push_back({FetchTimer(++fetches_), wait_ms_});
      return a;
    }
  }
  return BeginTraining();
}

Actions RoundGossip::OnTrained(ModelState trained) {
  if (phase_ != Phase::kTraining) return {};
  trained.set_version(round_);
  trained_ = std::make_shared<const ModelState>(std::move(trained));
  Actions a;
  const uint32_t degree = LiveDegree();
  Targets(round_, &scratch_);
  for (NodeId to : scratch_) a.sends.push_back({to, Message{Message::Kind::kModel, round_, trained_, 0.0, degree}});
  phase_ = Phase::kWaiting;
  a.timers.push_back({WaitTimer(round_), wait_ms_});
  if (Complete()) a.Append(Merge());
  return a;
}

bool RoundGossip::Acceptable(const Message& m) {
  if (m.model && m.model->CheckSameLayout(*model_).ok() && m.model->CheckFinite().ok()) return true;
  ++refused_;
  return false;
}

Actions RoundGossip::OnMessage(NodeId from, const Message& m) {
  if (phase_ == Phase::kIdle) return {};
  switch (m.kind) {
    case Message::Kind::kModelRequest: {
      Actions a;
      a.sends.push_back({from, Message{Message::Kind::kModelReply, round_, model_, 0.0, 0}});
      return a;
    }
    case Message::Kind::kModelReply:
      if (phase_ == Phase::kServer && m.round + 1 == round_ && from == ctx_.server) {
        if (Acceptable(m)) model_ = m.model;  // the server's average replaces the node's model
        return BeginTraining();
      }
      if (phase_ != Phase::kFetching || !Acceptable(m)) return {};
      model_ = m.model;
      round_ = std::max(round_, m.round);
      inbox_.erase(inbox_.begin(), inbox_.lower_bound(round_));
      return BeginTraining();
    case Message::Kind::kModel: {
      if (m.round > round_ + kMaxRoundsAhead || !Acceptable(m)) return {};
      uint64_t bucket = m.round;
      if (m.round < round_) {
        if (!keeps_late_models()) return {};
        bucket = round_;
      }
      std::vector<Received>& list = inbox_[bucket];
      // A duplicate from the same sender for the same round is dropped (the first one counts).
      for (const Received& r : list) {
        if (r.from == from) return {};
      }
      list.push_back({from, m.model, m.degree});
      if (phase_ == Phase::kWaiting && Complete()) return Merge();
      return {};
    }
    case Message::Kind::kPushSum:
    case Message::Kind::kOuterState:
      ++refused_;  // not this protocol's
      return {};
  }
  return {};
}

Actions RoundGossip::OnTimer(uint64_t timer) {
  if (phase_ == Phase::kWaiting && timer == WaitTimer(round_)) return Merge();
  if (phase_ == Phase::kFetching && timer == FetchTimer(fetches_)) return BeginTraining();  // nobody answered
  if (phase_ == Phase::kServer && timer == ServerTimer(round_)) return BeginTraining();     // nor did the server
  return {};
}

std::string RoundGossip::WaitEndedBy(uint64_t timer) {
  // Rounds counted from 1, as the peer's log counts them. The server is awaited after round_ has
  // moved on past the round whose models it averages.
  if (phase_ == Phase::kServer && timer == ServerTimer(round_)) {
    return "round " + std::to_string(round_) + ": the server's model (going on with its own)";
  }
  const std::string round = "round " + std::to_string(round_ + 1) + ": ";
  if (phase_ == Phase::kFetching && timer == FetchTimer(fetches_)) {
    return "a neighbour's model to rejoin from (starting from its own)";
  }
  if (phase_ != Phase::kWaiting || timer != WaitTimer(round_)) return "";
  std::vector<NodeId> expected;
  Expected(round_, &expected);
  const auto it = inbox_.find(round_);
  std::string missing;
  for (NodeId peer : expected) {
    const bool in = it != inbox_.end() && std::any_of(it->second.begin(), it->second.end(),
                                                      [&](const Received& r) { return r.from == peer; });
    if (!in) missing += (missing.empty() ? "" : ", ") + std::to_string(peer);
  }
  // Algorithms that wait for the timer alone (Epidemic Learning) expect nobody in particular.
  if (missing.empty()) return "";
  return round + "the models of peers " + missing + " (merging without them)";
}

Actions RoundGossip::OnPeerLeft(NodeId) {
  if (phase_ == Phase::kWaiting && Complete()) return Merge();
  return {};
}

Actions RoundGossip::Leave() {
  phase_ = Phase::kIdle;
  inbox_.clear();
  trained_.reset();
  return {};
}

bool RoundGossip::Complete() {
  Expected(round_, &scratch_);
  if (scratch_.empty()) return false;
  auto it = inbox_.find(round_);
  if (it == inbox_.end()) return false;
  for (NodeId peer : scratch_) {
    if (std::none_of(it->second.begin(), it->second.end(), [&](const Received& r) { return r.from == peer; })) {
      return false;
    }
  }
  return true;
}

Actions RoundGossip::Merge() {
  std::vector<Received> received;
  if (auto it = inbox_.find(round_); it != inbox_.end()) {
    received = std::move(it->second);
    inbox_.erase(it);
  }
  std::vector<WeightedModel> neighbours;
  double self_weight = 1.0;
  for (const Received& r : received) {
    const double w = Weight(r.degree, received.size());
    neighbours.push_back({r.model.get(), w});
    self_weight -= w;
  }
  Result<ModelState> merged =
      merge_->Merge(*trained_, std::max(0.0, self_weight), neighbours, round_, ctx_.total_rounds);
  // A rule that cannot merge (it never should on checked inputs) leaves the node its own model.
  model_ = merged.ok() ? std::make_shared<const ModelState>(std::move(merged).value()) : trained_;
  trained_.reset();
  ++round_;
  Actions a;
  a.rounds_completed = 1;
  if (AwaitsServer(round_ - 1, &a)) {
    phase_ = Phase::kServer;
    a.timers.push_back({ServerTimer(round_), wait_ms_});
    return a;
  }
  a.Append(BeginTraining());
  return a;
}

}  // namespace plexus::gossip
