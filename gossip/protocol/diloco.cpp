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
//
// Low-precision pseudo-gradients (codec=int8|fp16|bf16; INTELLECT-1's int8 all-reduce, Streaming
// DiLoCo's low-precision fragments): each contribution travels in the codec's bytes and is their
// decoding, on its author as on every other node (crdt_node.h), so the step stays bit-identical.
//
// DeMo between peers (MakeDeMoGossip, --gossip demo; Peng, Quesnelle and Kingma 2024, arXiv
// 2411.19870): the same node with the DCT codec and a sign step. Each round's pseudo-gradient (one
// plain SGD step, --local-steps 1 --momentum 0) joins the peer's local momentum, the codec's
// residual, which decays by `decay` first; the k largest DCT coefficients of every chunk of it
// travel and leave the residual; every peer steps x_{t+1} = x_t + lr sign(mean of the decoded
// components), as the paper's signum does and as the server's `demo` strategy does.
#include <algorithm>
#include <iomanip>
#include <map>
#include <memory>
#include <span>
#include <sstream>
#include <string>

#include "gossip/protocol/crdt_node.h"
#include "gossip/protocol/registry.h"

namespace plexus::gossip {
namespace {

struct OuterStep {
  double lr = 0.7, momentum = 0.9;
  bool nesterov = true;
  bool eager = false;
  // Streaming: fragments (0: the whole model at once), the share of its own values a node keeps
  // when a fragment's new outer values arrive, and whether it trains on meanwhile.
  size_t fragments = 0;
  double mix = 0.5;
  bool overlap = true;
  // DeMo: x += lr sign(d), no momentum.
  bool sign = false;
};

// The outer step on values x and momentum v with pseudo-gradient d, value by value, in double,
// rounded to float32 in one fixed order (the same bytes on every node).
void StepValues(std::span<float> x, std::span<float> v, std::span<const float> d, const OuterStep& s) {
  if (s.sign) {
    for (size_t j = 0; j < x.size(); ++j) {
      const double sign = d[j] > 0 ? 1.0 : d[j] < 0 ? -1.0 : 0.0;
      x[j] = static_cast<float>(static_cast<double>(x[j]) + s.lr * sign);
    }
    return;
  }
  for (size_t j = 0; j < x.size(); ++j) {
    const double dj = d[j];
    v[j] = static_cast<float>(s.momentum * v[j] + dj);
    const double move = s.nesterov ? dj + s.momentum * v[j] : static_cast<double>(v[j]);
    x[j] = static_cast<float>(x[j] + s.lr * move);
  }
}

// What DiLoCo's gossip nodes share: the outer momentum v; the answer to a rejoining peer, the
// outer model and v of one round in two parts (kOuterState, then kModelReply), taken once both
// parts of one peer's answer are in; and, for the variants that train on during the exchange, a
// trained model that waits for the round before to complete.
class OuterLoopNode : public CrdtNode {
 public:
  OuterLoopNode(const NodeContext& ctx, std::shared_ptr<const ModelState> initial, std::string strategy, double wait_ms,
                double interval_ms, OuterStep step, std::shared_ptr<const Codec> codec)
      : CrdtNode(ctx, initial, std::move(strategy), wait_ms, interval_ms),
        step_(step),
        momentum_(std::make_shared<const ModelState>(ModelState::ZerosLike(*initial))) {
    if (codec) SetContributionCodec(std::move(codec));
  }

  Actions OnTrained(ModelState trained) override {
    if (left_ || round_ >= ctx_.total_rounds) return {};
    if (waiting_) {  // trained on during the exchange: the round before is not complete yet
      if (Overlaps()) pending_ = std::make_unique<ModelState>(std::move(trained));
      return {};
    }
    return ContributeTrained(std::move(trained));
  }

  Actions OnMessage(NodeId from, const Message& m) override {
    Actions a;
    if (m.kind == Message::Kind::kModelRequest) {
      if (left_) return a;
      a.sends.push_back({from, Message{Message::Kind::kOuterState, round_, momentum_, 0.0, 0}});
      a.sends.push_back({from, Message{Message::Kind::kModelReply, round_, Outer(), 0.0, 0}});
      return a;
    }
    const bool is_outer = m.kind == Message::Kind::kModelReply;
    if (!catching_up_ || !m.model || (!is_outer && m.kind != Message::Kind::kOuterState)) return a;
    Parts& p = answers_[from];
    (is_outer ? p.outer : p.momentum) = {m.round, m.model};
    if (!p.outer.second || !p.momentum.second || p.outer.first != p.momentum.first) return a;
    catching_up_ = false;
    if (const uint64_t round = std::min(p.outer.first, ctx_.total_rounds); round >= round_) {
      a.rounds_completed = static_cast<uint32_t>(round - round_);
      round_ = round;
      momentum_ = p.momentum.second;
      TakeOuter(p.outer.second);
    }
    answers_.clear();
    a.train = round_ < ctx_.total_rounds;
    return a;
  }

 protected:
  // Whether the node trains the next round during the exchange.
  virtual bool Overlaps() const = 0;
  // Contributes round_'s training (and, overlapping, asks for the next round's).
  virtual Actions ContributeTrained(ModelState trained) = 0;
  // The outer model x, what a rejoining peer is given; and taking a peer's.
  virtual std::shared_ptr<const ModelState> Outer() const = 0;
  virtual void TakeOuter(std::shared_ptr<const ModelState> outer) = 0;

  // Overlapping: the round is complete, and a contribution that waited for it goes out now.
  Actions AfterRound() override {
    if (!Overlaps()) return CrdtNode::AfterRound();
    if (!pending_ || round_ >= ctx_.total_rounds) return {};
    std::unique_ptr<ModelState> trained = std::move(pending_);
    return ContributeTrained(std::move(*trained));
  }

  const OuterStep step_;
  std::shared_ptr<const ModelState> momentum_;  // v, the same on every node

 private:
  struct Parts {
    std::pair<uint64_t, std::shared_ptr<const ModelState>> outer, momentum;  // round, contents
  };
  std::map<NodeId, Parts> answers_;      // parts of peers' answers while catching up
  std::unique_ptr<ModelState> pending_;  // trained while the round before was not complete
};

class DiLoCoNode final : public OuterLoopNode {
 public:
  using OuterLoopNode::OuterLoopNode;

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

  bool Overlaps() const override { return step_.eager; }

  // Plain DiLoCo: a contribution's base is a fingerprint of the outer model it was trained from,
  // so that a node whose x left the others' (a round that ended by its timer with another set of
  // contributions) sees it: once the round is complete and more of its contributions share
  // another base than its own, the node takes a live peer's x, v and round of that base, as a
  // rejoining node does, before it trains on.
  uint64_t BaseTag() override {
    if (step_.eager) return CrdtNode::BaseTag();
    base_tag_ = std::stoull(model_->ContentSha256().substr(0, 15), nullptr, 16);
    return base_tag_;
  }
  Actions AfterRound() override {
    if (step_.eager || round_ == 0 || round_ >= ctx_.total_rounds) return OuterLoopNode::AfterRound();
    const CrdtReplica* last = replica(round_ - 1);
    if (last == nullptr) return OuterLoopNode::AfterRound();
    std::map<uint64_t, std::vector<NodeId>> authors_by_base;
    for (const std::string& id : last->LiveIds()) {
      const Contribution* c = last->Find(id);
      if (c == nullptr || c->created_round != round_ - 1 || c->author.rfind("peer-", 0) != 0) continue;
      authors_by_base[c->base_version].push_back(static_cast<NodeId>(std::stoul(c->author.substr(5))));
    }
    const size_t mine = authors_by_base[base_tag_].size();
    for (const auto& [base, authors] : authors_by_base) {
      if (authors.size() <= mine) continue;
      for (NodeId peer : authors) {
        if (peer != ctx_.self && peer < ctx_.nodes && ctx_.peers->IsLive(peer)) return AskForModel(peer);
      }
    }
    return OuterLoopNode::AfterRound();
  }
  Actions ContributeTrained(ModelState trained) override {
    return step_.eager ? ContributeEagerly(std::move(trained)) : Contribute(std::move(trained));
  }
  std::shared_ptr<const ModelState> Outer() const override { return model_; }
  void TakeOuter(std::shared_ptr<const ModelState> outer) override { model_ = std::move(outer); }

 private:
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
    StepValues(x.data(), v.data(), d, step_);
    x.set_version(model_->version() + 1);
    momentum_ = std::make_shared<const ModelState>(std::move(v));
    return std::make_shared<const ModelState>(std::move(x));
  }

  // Eager only: the model round_ was trained from, this node's delta of the last round it
  // contributed to, the last complete round's mean and count (and whether this node's own delta
  // is among them), and a trained model waiting for the round before to complete.
  std::shared_ptr<const ModelState> trained_from_, last_own_, last_mean_;
  uint64_t base_tag_ = 0;  // plain DiLoCo: the fingerprint of x this node's last contribution came from
  size_t last_count_ = 0;
  bool own_in_last_ = false;
};

// Streaming DiLoCo: each node trains its own replica theta_i from round to round; round t
// exchanges fragment p = t mod F only (tensors p, p+F, p+2F, ... of the model's order), so that
// fragment p is synchronised every F rounds, at offset p. Its contribution is the fragment of
// theta_i - x; once the round is complete every node takes the outer step on x's fragment p (the
// same bytes everywhere, as DiLoCo's) and mixes it into its replica: theta_p <- mix theta_p +
// (1 - mix) x_p. With overlap the node trains the next round while the fragment is exchanged, and
// the mix lands on what that round trained (the paper's overlap, tau = one round's steps).
class StreamingDiLoCoNode final : public OuterLoopNode {
 public:
  StreamingDiLoCoNode(const NodeContext& ctx, std::shared_ptr<const ModelState> initial, std::string strategy,
                      double wait_ms, double interval_ms, OuterStep step, std::shared_ptr<const Codec> codec)
      : OuterLoopNode(ctx, initial, std::move(strategy), wait_ms, interval_ms, step, std::move(codec)),
        outer_(initial),
        fragments_(step.fragments) {
    const std::vector<TensorSlot>& slots = initial->tensors();
    for (size_t k = 0; k < slots.size(); ++k) fragments_[k % step.fragments].push_back(k);
    for (const std::vector<size_t>& fragment : fragments_) {
      std::vector<TensorSpec> specs;
      for (size_t k : fragment) specs.push_back({slots[k].name, slots[k].shape});
      // The factory's model check guarantees a tensor per fragment; a failed Create leaves an
      // empty zero, whose contributions the replica refuses.
      Result<ModelState> zero = ModelState::Create(specs);
      zeros_.push_back(std::make_shared<const ModelState>(zero.ok() ? std::move(zero).value() : ModelState()));
    }
  }

 protected:
  std::shared_ptr<const ModelState> ZeroOf(uint64_t round) const override { return zeros_[round % fragments_.size()]; }

  // Fragment round_ mod F of theta_i - x.
  ModelState ContributionOf(ModelState trained) override {
    const size_t p = round_ % fragments_.size();
    ModelState delta = *zeros_[p];
    for (size_t i = 0; i < fragments_[p].size(); ++i) {
      std::span<float> out = delta.tensor(i);
      std::span<const float> t = trained.tensor(fragments_[p][i]);
      std::span<const float> x = outer_->tensor(fragments_[p][i]);
      for (size_t j = 0; j < out.size(); ++j) out[j] = t[j] - x[j];
    }
    return delta;
  }

  // The outer step on x's fragment; the mix into the replica now when the node waits (or the
  // run ends), else into what the next round trains.
  std::shared_ptr<const ModelState> NextModel(Result<ModelState> merged) override {
    if (!merged.ok()) return model_;
    const size_t p = round_ % fragments_.size();
    ModelState x = *outer_, v = *momentum_;
    for (size_t i = 0; i < fragments_[p].size(); ++i) {
      StepValues(x.tensor(fragments_[p][i]), v.tensor(fragments_[p][i]), merged->tensor(i), step_);
    }
    x.set_version(outer_->version() + 1);
    outer_ = std::make_shared<const ModelState>(std::move(x));
    momentum_ = std::make_shared<const ModelState>(std::move(v));
    mix_due_ = true;
    mix_fragment_ = p;
    if (step_.overlap && round_ + 1 < ctx_.total_rounds) return model_;
    ModelState mixed = *model_;
    Mix(mixed);
    return std::make_shared<const ModelState>(std::move(mixed));
  }

  bool Overlaps() const override { return step_.overlap; }
  Actions ContributeTrained(ModelState trained) override { return ContributeFragment(std::move(trained)); }
  // Rejoining peers get the outer model x (not this node's replica), and take it as theirs.
  std::shared_ptr<const ModelState> Outer() const override { return outer_; }
  void TakeOuter(std::shared_ptr<const ModelState> outer) override {
    model_ = outer_ = std::move(outer);
    mix_due_ = false;
  }

 private:
  // theta_q <- mix theta_q + (1 - mix) x_q for the fragment q whose outer values arrived last.
  void Mix(ModelState& theta) {
    if (!mix_due_) return;
    mix_due_ = false;
    for (size_t k : fragments_[mix_fragment_]) {
      std::span<float> t = theta.tensor(k);
      std::span<const float> x = outer_->tensor(k);
      for (size_t j = 0; j < t.size(); ++j) {
        t[j] = static_cast<float>(step_.mix * t[j] + (1.0 - step_.mix) * static_cast<double>(x[j]));
      }
    }
  }

  // The replica after round_'s training (mixed first if a fragment arrived meanwhile) becomes the
  // node's model, and round_'s fragment goes out; overlapping, the next round trains at once.
  Actions ContributeFragment(ModelState trained) {
    Mix(trained);
    model_ = std::make_shared<const ModelState>(trained);
    const uint64_t contributed = round_;
    Actions a = Contribute(std::move(trained));
    if (step_.overlap) a.train = contributed + 1 < ctx_.total_rounds;
    return a;
  }

  std::shared_ptr<const ModelState> outer_;               // x, the same on every node
  std::vector<std::vector<size_t>> fragments_;            // tensor indices, by fragment
  std::vector<std::shared_ptr<const ModelState>> zeros_;  // each fragment's zero model
  bool mix_due_ = false;                                  // fragment mix_fragment_'s new outer values not mixed in yet
  size_t mix_fragment_ = 0;
};

}  // namespace

namespace {

// The factory of DiLoCo's nodes (and DeMo's: step.sign) whose contributions travel in `codec`
// (null: float32).
std::unique_ptr<ProtocolFactory> OuterLoopFactory(std::string description, OuterStep step, double wait_ms,
                                                  double interval_ms, std::shared_ptr<const Codec> codec) {
  auto factory = std::make_unique<ProtocolFactory>(
      std::move(description), "complete",
      // The eager step needs the plain mean's sum, DeMo's sign the mean the paper takes.
      /*mixes_by_weight_only=*/step.eager || step.sign,
      [step, wait_ms, interval_ms, codec](const NodeContext& ctx, std::shared_ptr<const ModelState> initial,
                                          NeighbourMerge*) -> std::unique_ptr<Protocol> {
        if (step.fragments > 0) {
          return std::make_unique<StreamingDiLoCoNode>(ctx, std::move(initial), CrdtStrategy(ctx.merge_spec), wait_ms,
                                                       interval_ms, step, codec);
        }
        return std::make_unique<DiLoCoNode>(ctx, std::move(initial), CrdtStrategy(ctx.merge_spec), wait_ms, interval_ms,
                                            step, codec);
      });
  factory->set_uses_replicas();
  factory->set_needs_local_steps();
  return factory;
}

std::string Millis(const char* key, double ms) {
  return std::string(",") + key + "=" + std::to_string(static_cast<int64_t>(ms));
}

}  // namespace

Result<std::unique_ptr<ProtocolFactory>> MakeDiLoCoGossip(StrategySpec& spec) {
  OuterStep step;
  PLEXUS_ASSIGN_OR_RETURN(step.lr, spec.GetDouble("outer_lr", 0.7));
  PLEXUS_ASSIGN_OR_RETURN(step.momentum, spec.GetDouble("momentum", 0.9));
  PLEXUS_ASSIGN_OR_RETURN(step.nesterov, spec.GetBool("nesterov", true));
  PLEXUS_ASSIGN_OR_RETURN(step.eager, spec.GetBool("eager", false));
  PLEXUS_ASSIGN_OR_RETURN(double fragments, spec.GetDouble("fragments", 0));
  PLEXUS_ASSIGN_OR_RETURN(step.mix, spec.GetDouble("mix", 0.5));
  PLEXUS_ASSIGN_OR_RETURN(step.overlap, spec.GetBool("overlap", true));
  PLEXUS_ASSIGN_OR_RETURN(std::string codec_name, spec.GetString("codec", "f32"));
  if (!(fragments >= 0 && fragments <= 1e6 && fragments == static_cast<double>(static_cast<size_t>(fragments)))) {
    return InvalidArgumentError("diloco:fragments must be a whole number >= 1");
  }
  step.fragments = static_cast<size_t>(fragments);
  if (!(step.mix >= 0 && step.mix <= 1)) return InvalidArgumentError("diloco:mix must be in [0, 1]");
  if (step.eager && step.fragments > 0) {
    return InvalidArgumentError("diloco: eager=true and fragments=F are two ways to overlap; choose one");
  }
  PLEXUS_ASSIGN_OR_RETURN(double wait_ms, spec.GetDouble("wait_ms", 30000.0));
  PLEXUS_ASSIGN_OR_RETURN(double interval_ms, spec.GetDouble("interval_ms", 200.0));
  if (!(step.lr > 0)) return InvalidArgumentError("diloco:outer_lr must be positive");
  if (!(step.momentum >= 0 && step.momentum < 1)) return InvalidArgumentError("diloco:momentum must be in [0, 1)");
  if (!(wait_ms > 0)) return InvalidArgumentError("diloco:wait_ms must be positive");
  if (!(interval_ms > 0)) return InvalidArgumentError("diloco:interval_ms must be positive");
  std::shared_ptr<const Codec> codec;
  if (codec_name != "f32") {
    Result<std::unique_ptr<Codec>> made = MakeCodec(codec_name);
    if (!made.ok()) return InvalidArgumentError("diloco:codec: " + made.status().message());
    // Every peer must step on the same values, so every value must arrive, the same every time.
    if (!(*made)->keeps_every_value()) {
      return InvalidArgumentError("diloco:codec=" + codec_name +
                                  " drops or randomizes values; pseudo-gradients travel in f32, fp16, bf16 or int8");
    }
    codec = std::move(made).value();
  }
  const std::string description =
      "diloco(outer_lr=" + std::to_string(step.lr) + ",momentum=" + std::to_string(step.momentum) +
      ",nesterov=" + (step.nesterov ? "true" : "false") + (step.eager ? ",eager=true" : "") +
      (step.fragments > 0 ? ",fragments=" + std::to_string(step.fragments) + ",mix=" + std::to_string(step.mix) +
                                ",overlap=" + (step.overlap ? "true" : "false")
                          : "") +
      (codec ? ",codec=" + codec_name : "") + Millis("wait_ms", wait_ms) + Millis("interval_ms", interval_ms) + ")";
  std::unique_ptr<ProtocolFactory> factory = OuterLoopFactory(description, step, wait_ms, interval_ms, codec);
  if (step.fragments > 0) {
    factory->set_model_check([fragments = step.fragments](const ModelState& model) -> Status {
      if (model.tensors().size() < fragments) {
        return InvalidArgumentError("diloco:fragments=" + std::to_string(fragments) +
                                    " does not divide the model: it has " + std::to_string(model.tensors().size()) +
                                    " tensors, one fragment each at least");
      }
      return Status::Ok();
    });
  }
  return factory;
}

// Registered in registry.cpp as "demo": DiLoCo's node with a sign step, its contributions the
// DCT codec's fast components of each peer's momentum.
Result<std::unique_ptr<ProtocolFactory>> MakeDeMoGossip(StrategySpec& spec) {
  OuterStep step;
  step.sign = true;
  step.momentum = 0;
  PLEXUS_ASSIGN_OR_RETURN(step.lr, spec.GetDouble("lr", 0.001));
  PLEXUS_ASSIGN_OR_RETURN(double chunk, spec.GetDouble("chunk", 64));
  PLEXUS_ASSIGN_OR_RETURN(double k, spec.GetDouble("k", 8));
  PLEXUS_ASSIGN_OR_RETURN(double decay, spec.GetDouble("decay", 0.999));
  PLEXUS_ASSIGN_OR_RETURN(double wait_ms, spec.GetDouble("wait_ms", 30000.0));
  PLEXUS_ASSIGN_OR_RETURN(double interval_ms, spec.GetDouble("interval_ms", 200.0));
  if (!(step.lr > 0)) return InvalidArgumentError("demo:lr must be positive");
  if (!(wait_ms > 0)) return InvalidArgumentError("demo:wait_ms must be positive");
  if (!(interval_ms > 0)) return InvalidArgumentError("demo:interval_ms must be positive");
  auto whole = [](double v) { return v >= 1 && v <= 1e9 && v == static_cast<double>(static_cast<int64_t>(v)); };
  if (!whole(chunk) || !whole(k)) return InvalidArgumentError("demo:chunk and demo:k must be whole numbers >= 1");
  std::ostringstream codec_spec;
  codec_spec << std::setprecision(15) << "dct:chunk=" << static_cast<int64_t>(chunk) << ",k=" << static_cast<int64_t>(k)
             << ",decay=" << decay;
  Result<std::unique_ptr<Codec>> made = MakeCodec(codec_spec.str());
  if (!made.ok()) return InvalidArgumentError("demo: " + made.status().message());
  std::shared_ptr<const Codec> codec = std::move(made).value();
  std::ostringstream description;
  description << std::setprecision(15) << "demo(lr=" << step.lr << ",chunk=" << static_cast<int64_t>(chunk)
              << ",k=" << static_cast<int64_t>(k) << ",decay=" << decay << Millis("wait_ms", wait_ms)
              << Millis("interval_ms", interval_ms) << ")";
  return OuterLoopFactory(description.str(), step, wait_ms, interval_ms, std::move(codec));
}

}  // namespace plexus::gossip
