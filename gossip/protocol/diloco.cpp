// DiLoCo over gossip peers, with no server (Douillard et al. 2023, arXiv 2311.08105; the
// decentralized form INTELLECT-1 ran over PCCL). Every peer runs the outer loop itself:
//   round t at peer i: train H inner steps from the outer model x_t (--local-steps, the peer's
//                      own inner optimizer, AdamW with --optimizer adamw); its pseudo-gradient
//                      delta_i = theta_i - x_t is a signed CRDT contribution of round t
//                      (crdt_node.h: pulled by Merkle digests, the round complete as CRDT
//                      gossip's is)
//                      d = --merge over the round's deltas (mean: their plain mean)
//                      v <- momentum v + d;  x_{t+1} = x_t + outer_lr (d + momentum v)  (Nesterov)
//                                                   or x_t + outer_lr v                 (nesterov=false)
// The agreement on who took part is the replica: every peer that resolved the same contributions
// holds the same d, and from the same x_t and v the same x_{t+1} and v, bit for bit (the step runs
// elementwise in double and rounds to float32 in one fixed order; v is kept in float32 so that it
// travels exactly). All peers start from the same x_0 (the model of the shared --seed) and v = 0. A
// peer that rejoins (or starts late, or restarts from its database) takes a live peer's x_t and v
// together with its round (kOuterState, then kModelReply), as PCCL's joiners take the shared
// state: with its own saved v it would step differently from everyone else. Without an answer
// within wait_ms it goes on from its own x and v = 0, and its later models differ from the others'.
//
// Eager updates (eager=true; Kale, Douillard and Donchev 2025, arXiv 2502.12996): the outer step
// of round t no longer waits for round t's exchange. Once peer i has trained round t it
// contributes delta_i(t) and at once steps with
//   d~ = (delta_i(t) + the other peers' delta_j(t-1)) / n(t-1)
// (its own fresh pseudo-gradient in place of the part of the average still in flight; the others'
// come from the last complete round as n(t-1) d(t-1) - delta_i(t-1); in round 0, d~ = delta_i(0)),
// and trains round t+1 from there while round t's contributions are being pulled. Round t must be
// complete before round t+1's contribution goes out; its mean then enters the next eager step. The
// exchange overlaps a whole inner phase. The peers' models differ (each steps with its own term),
// so their hashes do too; the sum needs the plain mean (--merge mean).
#include <algorithm>
#include <map>
#include <memory>
#include <span>
#include <string>

#include "gossip/protocol/crdt_node.h"
#include "gossip/protocol/registry.h"

namespace plexus::gossip {
namespace {

struct OuterStep {
  double lr = 0.7, momentum = 0.9;
  bool nesterov = true;
  bool eager = false;
};

class DiLoCoNode final : public CrdtNode {
 public:
  DiLoCoNode(const NodeContext& ctx, std::shared_ptr<const ModelState> initial, std::string strategy, double wait_ms,
             double interval_ms, OuterStep step)
      : CrdtNode(ctx, initial, std::move(strategy), wait_ms, interval_ms),
        step_(step),
        momentum_(std::make_shared<const ModelState>(ModelState::ZerosLike(*initial))) {}

  // Eager: a trained round's contribution waits for the round before to complete; it is then
  // made, the eager step taken at once and the next round trained meanwhile.
  Actions OnTrained(ModelState trained) override {
    if (!step_.eager) return CrdtNode::OnTrained(std::move(trained));
    if (left_ || round_ >= ctx_.total_rounds) return {};
    if (waiting_) {
      pending_ = std::make_unique<ModelState>(std::move(trained));
      return {};
    }
    return ContributeEagerly(std::move(trained));
  }

  // A rejoining peer's request is answered with the outer momentum and the model of this round;
  // the node's own answer is taken once both parts of one peer's answer, of one round, are in.
  Actions OnMessage(NodeId from, const Message& m) override {
    Actions a;
    if (m.kind == Message::Kind::kModelRequest) {
      if (left_) return a;
      a.sends.push_back({from, Message{Message::Kind::kOuterState, round_, momentum_, 0.0, 0}});
      a.sends.push_back({from, Message{Message::Kind::kModelReply, round_, model_, 0.0, 0}});
      return a;
    }
    const bool is_model = m.kind == Message::Kind::kModelReply;
    if (!catching_up_ || !m.model || (!is_model && m.kind != Message::Kind::kOuterState)) return a;
    Answer& answer = answers_[from];
    (is_model ? answer.model : answer.momentum) = {m.round, m.model};
    if (!answer.model.second || !answer.momentum.second || answer.model.first != answer.momentum.first) return a;
    catching_up_ = false;
    if (const uint64_t round = std::min(answer.model.first, ctx_.total_rounds); round >= round_) {
      a.rounds_completed = static_cast<uint32_t>(round - round_);
      round_ = round;
      model_ = answer.model.second;
      momentum_ = answer.momentum.second;
    }
    answers_.clear();
    a.train = round_ < ctx_.total_rounds;
    return a;
  }

 protected:
  // The pseudo-gradient delta_i = theta_i - x_t, x_t the model it trained from.
  ModelState ContributionOf(ModelState trained) override {
    std::span<float> d = trained.data();
    std::span<const float> x = (step_.eager ? trained_from_ : model_)->data();
    for (size_t j = 0; j < d.size(); ++j) d[j] -= x[j];
    return trained;
  }

  // The outer step on the merged pseudo-gradient; with nothing live, the model stays. Eager: the
  // step was taken already; the round's mean, its count and whether this node's own
  // contribution is among them are kept for the next eager step.
  std::shared_ptr<const ModelState> NextModel(Result<ModelState> merged) override {
    if (!step_.eager) return merged.ok() ? Step(*merged) : model_;
    last_count_ = 0;
    own_in_last_ = false;
    if (merged.ok()) {
      const CrdtReplica& round = ReplicaOf(round_);
      for (const std::string& id : round.LiveIds()) {
        const Contribution* c = round.Find(id);
        if (c == nullptr || c->created_round != round_) continue;
        ++last_count_;
        own_in_last_ = own_in_last_ || c->author == AuthorOf(ctx_.self);
      }
      last_mean_ = std::make_shared<const ModelState>(std::move(merged).value());
    }
    return model_;
  }

  // Eager: the round is complete; a contribution that waited for it goes out now.
  Actions AfterRound() override {
    if (!step_.eager) return CrdtNode::AfterRound();
    if (!pending_ || round_ >= ctx_.total_rounds) return {};
    std::unique_ptr<ModelState> trained = std::move(pending_);
    return ContributeEagerly(std::move(*trained));
  }

 private:
  struct Answer {
    std::pair<uint64_t, std::shared_ptr<const ModelState>> model, momentum;  // round, contents
  };

  // Contributes round_'s delta, steps eagerly with d~ and trains the next round from there.
  Actions ContributeEagerly(ModelState trained) {
    trained_from_ = model_;
    ModelState eager = ContributionOf(ModelState(trained));  // delta_i(t)
    auto own = std::make_shared<const ModelState>(eager);
    if (last_count_ > 0 && last_mean_) {
      const double n = static_cast<double>(last_count_ + (own_in_last_ ? 0 : 1));
      std::span<float> d = eager.data();
      std::span<const float> mean = last_mean_->data();
      for (size_t j = 0; j < d.size(); ++j) {
        double others = static_cast<double>(last_count_) * mean[j];
        if (own_in_last_ && last_own_) others -= last_own_->data()[j];
        d[j] = static_cast<float>((d[j] + others) / n);
      }
    }
    last_own_ = std::move(own);
    model_ = Step(eager);
    const uint64_t contributed = round_;
    Actions a = Contribute(std::move(trained));
    a.train = contributed + 1 < ctx_.total_rounds;
    return a;
  }

  // x_{t+1} from x_t = model_ and the pseudo-gradient d, advancing v.
  std::shared_ptr<const ModelState> Step(const ModelState& pseudo_gradient) {
    std::span<const float> d = pseudo_gradient.data();
    ModelState x = *model_, v = *momentum_;
    std::span<float> xs = x.data();
    std::span<float> vs = v.data();
    for (size_t j = 0; j < xs.size(); ++j) {
      const double dj = d[j];
      vs[j] = static_cast<float>(step_.momentum * vs[j] + dj);
      const double move = step_.nesterov ? dj + step_.momentum * vs[j] : static_cast<double>(vs[j]);
      xs[j] = static_cast<float>(xs[j] + step_.lr * move);
    }
    x.set_version(model_->version() + 1);
    momentum_ = std::make_shared<const ModelState>(std::move(v));
    return std::make_shared<const ModelState>(std::move(x));
  }

  const OuterStep step_;
  std::shared_ptr<const ModelState> momentum_;
  std::map<NodeId, Answer> answers_;  // parts of peers' answers while catching up
  // Eager only: the model round_ was trained from, this node's delta of the last round it
  // contributed to, the last complete round's mean and count (and whether this node's own delta
  // is among them), and a trained model waiting for the round before to complete.
  std::shared_ptr<const ModelState> trained_from_, last_own_, last_mean_;
  size_t last_count_ = 0;
  bool own_in_last_ = false;
  std::unique_ptr<ModelState> pending_;
};

}  // namespace

Result<std::unique_ptr<ProtocolFactory>> MakeDiLoCoGossip(StrategySpec& spec) {
  OuterStep step;
  PLEXUS_ASSIGN_OR_RETURN(step.lr, spec.GetDouble("outer_lr", 0.7));
  PLEXUS_ASSIGN_OR_RETURN(step.momentum, spec.GetDouble("momentum", 0.9));
  PLEXUS_ASSIGN_OR_RETURN(step.nesterov, spec.GetBool("nesterov", true));
  PLEXUS_ASSIGN_OR_RETURN(step.eager, spec.GetBool("eager", false));
  PLEXUS_ASSIGN_OR_RETURN(double wait_ms, spec.GetDouble("wait_ms", 30000.0));
  PLEXUS_ASSIGN_OR_RETURN(double interval_ms, spec.GetDouble("interval_ms", 200.0));
  if (!(step.lr > 0)) return InvalidArgumentError("diloco:outer_lr must be positive");
  if (!(step.momentum >= 0 && step.momentum < 1)) return InvalidArgumentError("diloco:momentum must be in [0, 1)");
  if (!(wait_ms > 0)) return InvalidArgumentError("diloco:wait_ms must be positive");
  if (!(interval_ms > 0)) return InvalidArgumentError("diloco:interval_ms must be positive");
  const std::string description =
      "diloco(outer_lr=" + std::to_string(step.lr) + ",momentum=" + std::to_string(step.momentum) +
      ",nesterov=" + (step.nesterov ? "true" : "false") + (step.eager ? ",eager=true" : "") +
      ",wait_ms=" + std::to_string(static_cast<int64_t>(wait_ms)) +
      ",interval_ms=" + std::to_string(static_cast<int64_t>(interval_ms)) + ")";
  PLEXUS_ASSIGN_OR_RETURN(
      std::unique_ptr<ProtocolFactory> factory,
      MakeFactory(
          description, "complete",
          [step, wait_ms, interval_ms](const NodeContext& ctx, std::shared_ptr<const ModelState> initial,
                                       NeighbourMerge*) -> std::unique_ptr<Protocol> {
            return std::make_unique<DiLoCoNode>(ctx, std::move(initial), CrdtStrategy(ctx.merge_spec), wait_ms,
                                                interval_ms, step);
          },
          /*mixes_by_weight_only=*/step.eager));  // the eager step needs the plain mean's sum
  factory->set_uses_replicas();
  return factory;
}

}  // namespace plexus::gossip
