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
#include <algorithm>
#include <map>
#include <memory>
#include <string>

#include "gossip/protocol/crdt_node.h"
#include "gossip/protocol/registry.h"

namespace plexus::gossip {
namespace {

struct OuterStep {
  double lr = 0.7, momentum = 0.9;
  bool nesterov = true;
};

class DiLoCoNode final : public CrdtNode {
 public:
  DiLoCoNode(const NodeContext& ctx, std::shared_ptr<const ModelState> initial, std::string strategy, double wait_ms,
             double interval_ms, OuterStep step)
      : CrdtNode(ctx, initial, std::move(strategy), wait_ms, interval_ms),
        step_(step),
        momentum_(std::make_shared<const ModelState>(ModelState::ZerosLike(*initial))) {}

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

  // The outer momentum (for tests and the status of a peer).
  const ModelState& momentum() const { return *momentum_; }

 protected:
  // The pseudo-gradient delta_i = theta_i - x_t.
  ModelState ContributionOf(ModelState trained) override {
    std::span<float> d = trained.data();
    std::span<const float> x = model_->data();
    for (size_t j = 0; j < d.size(); ++j) d[j] -= x[j];
    return trained;
  }

  // The outer step on the merged pseudo-gradient; with nothing live, the model stays.
  std::shared_ptr<const ModelState> NextModel(Result<ModelState> merged) override {
    if (!merged.ok()) return model_;
    std::span<const float> d = merged->data();
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

 private:
  struct Answer {
    std::pair<uint64_t, std::shared_ptr<const ModelState>> model, momentum;  // round, contents
  };
  const OuterStep step_;
  std::shared_ptr<const ModelState> momentum_;
  std::map<NodeId, Answer> answers_;  // parts of peers' answers while catching up
};

}  // namespace

Result<std::unique_ptr<ProtocolFactory>> MakeDiLoCoGossip(StrategySpec& spec) {
  OuterStep step;
  PLEXUS_ASSIGN_OR_RETURN(step.lr, spec.GetDouble("outer_lr", 0.7));
  PLEXUS_ASSIGN_OR_RETURN(step.momentum, spec.GetDouble("momentum", 0.9));
  PLEXUS_ASSIGN_OR_RETURN(step.nesterov, spec.GetBool("nesterov", true));
  PLEXUS_ASSIGN_OR_RETURN(double wait_ms, spec.GetDouble("wait_ms", 30000.0));
  PLEXUS_ASSIGN_OR_RETURN(double interval_ms, spec.GetDouble("interval_ms", 200.0));
  if (!(step.lr > 0)) return InvalidArgumentError("diloco:outer_lr must be positive");
  if (!(step.momentum >= 0 && step.momentum < 1)) return InvalidArgumentError("diloco:momentum must be in [0, 1)");
  if (!(wait_ms > 0)) return InvalidArgumentError("diloco:wait_ms must be positive");
  if (!(interval_ms > 0)) return InvalidArgumentError("diloco:interval_ms must be positive");
  const std::string description =
      "diloco(outer_lr=" + std::to_string(step.lr) + ",momentum=" + std::to_string(step.momentum) +
      ",nesterov=" + (step.nesterov ? "true" : "false") + ",wait_ms=" + std::to_string(static_cast<int64_t>(wait_ms)) +
      ",interval_ms=" + std::to_string(static_cast<int64_t>(interval_ms)) + ")";
  PLEXUS_ASSIGN_OR_RETURN(
      std::unique_ptr<ProtocolFactory> factory,
      MakeFactory(description, "complete",
                  [step, wait_ms, interval_ms](const NodeContext& ctx, std::shared_ptr<const ModelState> initial,
                                               NeighbourMerge*) -> std::unique_ptr<Protocol> {
                    return std::make_unique<DiLoCoNode>(ctx, std::move(initial), CrdtStrategy(ctx.merge_spec), wait_ms,
                                                        interval_ms, step);
                  }));
  factory->set_uses_replicas();
  return factory;
}

}  // namespace plexus::gossip
