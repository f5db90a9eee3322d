// PushSum: push-sum / stochastic gradient push (Kempe et al. 2003; Assran et al. 2019), in the running-sum
// form. A node holds a numerator y and a weight w; its model is z = y / w. Each round it trains
// from z, adds the step to y (y += z' - z, SGP), keeps 1 / (k + 1) of (y, w) and pushes a share
// to each of its k live out-neighbours. What it sends on a link is the running total of every
// share ever pushed on that link, and the receiver adds the difference to the last total it saw:
// a lost message is made good by the next one, a duplicate or a reordered older one adds
// nothing, so no mass is lost or counted twice. Only column-stochastic mixing is needed, so it
// runs on directed and time-varying graphs, asynchronously: a node never waits for a neighbour.
// A leaving node hands all its mass to a live neighbour; a joining node asks one, which gives it
// half of its own. Memory per node: y, z and one running total per link it has used.
#pragma once

#include <cmath>
#include <map>
#include <memory>
#include <vector>

#include "gossip/protocol/protocol.h"

namespace plexus::gossip {

class PushSum final : public Protocol {
 public:
  // The numerator y and the weight w (the model is y / w): for tests of the invariant.
  const ModelState& numerator() const { return y_; }
  double weight() const { return w_; }
  uint64_t messages_refused() const { return refused_; }

  PushSum(const NodeContext& ctx, std::shared_ptr<const ModelState> initial)
      : ctx_(ctx), rng_(Rng::Derive(ctx.seed, ctx.self)), y_(*initial), z_(std::move(initial)) {}

  static constexpr double kMinWeight = 1e-12;  // below this z = y / w is not trusted (no mass)
  static constexpr double kFetchTimeoutMs = 10000.0;

  Actions Start(bool rejoining) override {
    if (rejoining) {
      phase_ = Phase::kFetching;
      return AskForMass();
    }
    return BeginTraining();
  }

  Actions OnTrained(ModelState trained) override {
    if (phase_ != Phase::kTraining) return {};
    // y += z' - z: the local step, on the numerator (SGP).
    std::span<float> y = y_.data();
    std::span<const float> after = trained.data(), before = train_base_->data();
    for (size_t k = 0; k < y.size(); ++k) y[k] += after[k] - before[k];
    train_base_.reset();
    Actions a;
    ctx_.peers->OutNeighbours(ctx_.self, round_, &scratch_);
    const double share = 1.0 / static_cast<double>(scratch_.size() + 1);
    for (NodeId to : scratch_) a.sends.push_back({to, Push(to, share)});
    Keep(share * static_cast<double>(scratch_.size()));
    ++round_;
    a.Append(BeginTraining());
    a.rounds_completed = 1;
    return a;
  }

  Actions OnMessage(NodeId from, const Message& m) override {
    if (phase_ == Phase::kIdle) return {};
    if (m.kind == Message::Kind::kModelRequest) {
      // Give a joining node half of this node's mass, on the running total of the link.
      if (w_ < kMinWeight) return {};
      Actions a;
      a.sends.push_back({from, Push(from, 0.5)});
      Keep(0.5);
      return a;
    }
    if (m.kind != Message::Kind::kPushSum || !m.model || !m.model->CheckSameLayout(y_).ok() ||
        !m.model->CheckFinite().ok() || !std::isfinite(m.weight) || m.weight < 0) {
      ++refused_;
      return {};
    }
    Link& link = received_[from];
    if (m.weight <= link.weight) return {};  // a duplicate, or older than what arrived already
    std::span<float> y = y_.data();
    std::span<const float> total = m.model->data();
    if (link.total) {
      std::span<const float> seen = link.total->data();
      for (size_t k = 0; k < y.size(); ++k) y[k] += total[k] - seen[k];
    } else {
      for (size_t k = 0; k < y.size(); ++k) y[k] += total[k];
    }
    w_ += m.weight - link.weight;
    link = {m.model, m.weight};
    z_.reset();
    if (phase_ == Phase::kFetching && w_ >= kMinWeight) return BeginTraining();
    return {};
  }

  // The fetch timer: nobody answered; ask another neighbour.
  Actions OnTimer(uint64_t timer) override {
    if (phase_ != Phase::kFetching || timer != fetches_) return {};
    return AskForMass();
  }
  Actions OnPeerLeft(NodeId) override { return {}; }

  Actions Leave() override {
    Actions a;
    ctx_.peers->SampleOutNeighbours(ctx_.self, round_, 1, rng_, &scratch_);
    if (!scratch_.empty() && w_ >= kMinWeight) {
      a.sends.push_back({scratch_[0], Push(scratch_[0], 1.0)});
      Keep(1.0);
    }
    phase_ = Phase::kIdle;
    train_base_.reset();
    return a;
  }

  std::shared_ptr<const ModelState> model() const override {
    if (!z_) {
      ModelState z = y_;
      if (w_ >= kMinWeight) z.Scale(static_cast<float>(1.0 / w_));
      z.set_version(round_);
      z_ = std::make_shared<const ModelState>(std::move(z));
    }
    return z_;
  }
  uint64_t rounds_completed() const override { return round_; }

 private:
  enum class Phase { kIdle, kFetching, kTraining };
  struct Link {
    std::shared_ptr<const ModelState> total;  // running total of the numerator on this link
    double weight = 0.0;                      // running total of the weight
  };

  // A (re)joining node asks a live neighbour for half of its mass, and retries after
  // kFetchTimeoutMs; with no live neighbour at all it starts over alone with mass 1 (new mass:
  // the only node left defines the average).
  Actions AskForMass() {
    ctx_.peers->SampleOutNeighbours(ctx_.self, round_, 1, rng_, &scratch_);
    if (scratch_.empty()) {
      if (w_ < kMinWeight) w_ = 1.0;
      return BeginTraining();
    }
    Actions a;
    a.sends.push_back({scratch_[0], Message{Message::Kind::kModelRequest, round_, nullptr, 0.0, 0}});
    a.timers.push_back({++fetches_, kFetchTimeoutMs});
    return a;
  }

  Actions BeginTraining() {
    phase_ = Phase::kTraining;
    train_base_ = model();
    Actions a;
    a.train = true;
    return a;
  }

  // Adds share x (y, w) to the running total sent to `to` and returns the message carrying it.
  Message Push(NodeId to, double share) {
    Link& link = sent_[to];
    ModelState total = link.total ? *link.total : ModelState::ZerosLike(y_);
    std::span<float> t = total.data();
    std::span<const float> y = y_.data();
    const auto f = static_cast<float>(share);
    for (size_t k = 0; k < t.size(); ++k) t[k] += f * y[k];
    link.total = std::make_shared<const ModelState>(std::move(total));
    link.weight += share * w_;
    return Message{Message::Kind::kPushSum, round_, link.total, link.weight, 0};
  }
  // Removes `given` (a fraction) of (y, w): what Push handed out.
  void Keep(double given) {
    const double kept = 1.0 - given;
    y_.Scale(static_cast<float>(kept));
    w_ *= kept;
    z_.reset();
  }

  const NodeContext ctx_;
  Rng rng_;
  ModelState y_;
  double w_ = 1.0;
  mutable std::shared_ptr<const ModelState> z_;  // y / w, computed when asked
  std::shared_ptr<const ModelState> train_base_;
  Phase phase_ = Phase::kIdle;
  uint64_t round_ = ctx_.start_round;
  uint64_t fetches_ = 0;
  uint64_t refused_ = 0;
  std::map<NodeId, Link> sent_, received_;
  std::vector<NodeId> scratch_;
};

}  // namespace plexus::gossip
