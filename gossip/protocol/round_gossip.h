// RoundGossip: the round structure D-PSGD and Epidemic Learning share (adapt, then combine).
// Round t at node i: train from x_i to x_i'; send x_i' (tagged t) to this round's targets; wait
// for the models tagged t from the peers the algorithm expects, or until the round's timer
// fires (wait_ms after the sends: a neighbour that left, a lost message or a partition never
// stall a node); then x_i <- merge(x_i', received), and round t + 1 begins. Models tagged with a
// later round wait in an inbox for it (bounded); models of earlier rounds are dropped, or, for
// algorithms that keep them (Epidemic Learning, which cannot know how many will come), join the
// next merge. A (re)joining node first asks a live neighbour for its model and round.
// Every neighbour model is checked (layout, finite values) before it is kept; a bad one is
// refused and counted, never merged. Subclasses choose targets, expected senders and weights.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "gossip/protocol/neighbour_merge.h"
#include "gossip/protocol/protocol.h"

namespace plexus::gossip {

class RoundGossip : public Protocol {
 public:
  // `merge` is borrowed and may be shared by every node of one driver thread.
  RoundGossip(const NodeContext& ctx, std::shared_ptr<const ModelState> initial, NeighbourMerge* merge, double wait_ms);

  Actions Start(bool rejoining) override;
  Actions OnTrained(ModelState trained) override;
  Actions OnMessage(NodeId from, const Message& message) override;
  Actions OnTimer(uint64_t timer) override;
  std::string WaitEndedBy(uint64_t timer) override;
  Actions OnPeerLeft(NodeId peer) override;
  Actions Leave() override;
  std::shared_ptr<const ModelState> model() const override { return model_; }
  uint64_t rounds_completed() const override { return round_; }
  uint64_t messages_refused() const { return refused_; }

  // Rounds a model may run ahead of this node and still be kept for later.
  static constexpr uint64_t kMaxRoundsAhead = 64;

 protected:
  // The peers this round's model goes to.
  virtual void Targets(uint64_t round, std::vector<NodeId>* out) = 0;
  // The live peers whose models this round waits for; empty: wait for the timer.
  virtual void Expected(uint64_t round, std::vector<NodeId>* out) = 0;
  // The mixing weight of a model from a sender of `sender_degree`, when `received` models are
  // merged this round; the node keeps 1 minus the sum of the weights.
  virtual double Weight(uint32_t sender_degree, size_t received) = 0;
  // True: models of earlier rounds join the next merge instead of being dropped.
  virtual bool keeps_late_models() const = 0;
  // After the merge that completed `round`: true when the node now waits for a server's model
  // (semi-decentralized), with what it sends the server in `a`. The wait ends with the server's
  // kModelReply, or after wait_ms with the node's own model.
  virtual bool AwaitsServer(uint64_t /*round*/, Actions* /*a*/) { return false; }

  // Live out-neighbours at this node's current round.
  uint32_t LiveDegree();

  const NodeContext ctx_;
  Rng rng_;

 private:
  enum class Phase { kIdle, kFetching, kTraining, kWaiting, kServer };
  struct Received {
    NodeId from;
    std::shared_ptr<const ModelState> model;
    uint32_t degree;
  };

  bool Acceptable(const Message& m);
  bool Complete();
  Actions Merge();
  Actions BeginTraining();

  NeighbourMerge* const merge_;

 protected:
  const double wait_ms_;

 private:
  Phase phase_ = Phase::kIdle;
  uint64_t round_ = ctx_.start_round;
  uint64_t fetches_ = 0;
  std::shared_ptr<const ModelState> model_, trained_;
  std::map<uint64_t, std::vector<Received>> inbox_;  // by round
  uint64_t refused_ = 0;
  std::vector<NodeId> scratch_;
};

}  // namespace plexus::gossip
