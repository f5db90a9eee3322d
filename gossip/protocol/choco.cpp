// CHOCO-gossip (Koloskova, Stich, Jaggi 2019), compressed gossip that still reaches consensus.
// Each node keeps its model x and public copies x^ of itself and of each in-neighbour, all zero
// at first and updated alike everywhere, because only compressed changes travel (Algorithm 2 of
// the paper, in its order):
//   round t at node i: train (x <- x')
//                      q <- Q(x - x^_i);  x^_i <- x^_i + q;  send q   compress only the change
//                      on receipt of q_j:  x^_j <- x^_j + q_j
//                      once the round's q of every in-neighbour is in (or wait_ms passed):
//                      x <- x + gamma * sum_j W_ij (x^_j - x^_i)     consensus on the public copies
// With a lossless codec and gamma = 1 this is D-PSGD with uniform weights.
// W_ij = 1 / (1 + d_i) over the live in-neighbours (uniform weights: symmetric, hence the average
// is kept, on regular graphs). Q is a codec of compression/codec.h (the message carries what the
// receiver decodes, and the encoded size, which is what the network is charged). Additions to a
// public copy commute, so a q is applied whenever it arrives, even late (the transport must not
// duplicate messages: the simulator's does not); a round waits for the round's q of every live
// in-neighbour, or wait_ms. No error feedback beyond the algorithm's
// own (x - x^ is the error still to send). A rejoining node starts from its own model and copies.
// Each message carries the encoded bytes too (Message::encoded): `plexus peer` sends those, not
// the decoded change, and the receiver decodes them with the same codec.
#include <algorithm>
#include <map>

#include "compression/codec.h"
#include "gossip/protocol/registry.h"

namespace plexus::gossip {
namespace {

// to += what, value by value (same layout).
void AddTo(ModelState* to, const ModelState& what) {
  std::span<float> t = to->data();
  std::span<const float> w = what.data();
  for (size_t k = 0; k < t.size(); ++k) t[k] += w[k];
}

class ChocoNode final : public Protocol {
 public:
  ChocoNode(const NodeContext& ctx, std::shared_ptr<const ModelState> initial, std::shared_ptr<const Codec> codec,
            std::string codec_name, double gamma, double wait_ms)
      : ctx_(ctx),
        rng_(Rng::Derive(ctx.seed, ctx.self)),
        codec_(std::move(codec)),
        codec_name_(std::move(codec_name)),
        gamma_(gamma),
        wait_ms_(wait_ms),
        x_(std::move(initial)),
        zeros_(ModelState::ZerosLike(*x_)),
        own_copy_(zeros_),
        round_(ctx.start_round) {}

  Actions Start(bool) override {
    Actions a;
    waiting_ = false;
    if (round_ < ctx_.total_rounds) a.train = true;
    training_ = a.train;
    return a;
  }

  Actions OnTrained(ModelState trained) override {
    Actions a;
    if (!training_) return a;
    training_ = false;
    ModelState change = trained;
    change.Subtract(own_copy_);
    auto encoded = std::make_shared<const std::string>(codec_->Encode(change, nullptr, rng_.NextU64()));
    const std::string& bytes = *encoded;
    Result<ModelState> q = codec_->Decode(bytes, zeros_);
    if (!q.ok()) q = ModelState::ZerosLike(zeros_);  // (a change that does not encode finite: nothing new)
    AddTo(&own_copy_, *q);
    x_ = std::make_shared<const ModelState>(trained);
    half_step_ = std::move(trained);
    auto shared_q = std::make_shared<const ModelState>(std::move(q).value());
    ctx_.peers->OutNeighbours(ctx_.self, round_, &out_);
    ctx_.peers->InNeighbours(ctx_.self, round_, &in_);
    for (NodeId to : out_) {
      Message m{Message::Kind::kModel, round_, shared_q, 0.0, static_cast<uint32_t>(in_.size())};
      m.encoded_bytes = bytes.size();
      m.encoded = encoded;
      m.codec = codec_name_;
      a.sends.push_back({to, std::move(m)});
    }
    waiting_ = true;
    a.timers.push_back({round_, wait_ms_});
    a.Append(MaybeAdvance());
    return a;
  }

  Actions OnMessage(NodeId from, const Message& m) override {
    if (m.kind != Message::Kind::kModel || !m.model || !m.model->CheckSameLayout(zeros_).ok() ||
        !m.model->CheckFinite().ok()) {
      return {};
    }
    // Every change is applied, once per message: a node that restarted a round sends that
    // round's change again, and its own copy took both.
    AddTo(&CopyOf(from), *m.model);
    uint64_t& heard = heard_through_[from];
    heard = std::max(heard, m.round + 1);
    return MaybeAdvance();
  }

  Actions OnTimer(uint64_t timer) override {
    if (!waiting_ || timer != round_) return {};
    return Advance();
  }
  Actions OnPeerLeft(NodeId) override { return MaybeAdvance(); }
  // A node that left neither trains nor waits until it starts again; the changes it hears of
  // meanwhile still go into its copies (they must stay equal to its neighbours' own).
  Actions Leave() override {
    training_ = waiting_ = false;
    return {};
  }
  std::shared_ptr<const ModelState> model() const override { return x_; }
  uint64_t rounds_completed() const override { return round_; }

 private:
  ModelState& CopyOf(NodeId j) { return copies_.try_emplace(j, zeros_).first->second; }

  Actions MaybeAdvance() {
    if (!waiting_) return {};
    ctx_.peers->InNeighbours(ctx_.self, round_, &in_);
    for (NodeId j : in_) {
      auto it = heard_through_.find(j);
      if (it == heard_through_.end() || it->second <= round_) return {};
    }
    return Advance();
  }

  Actions Advance() {
    Actions a;
    waiting_ = false;
    // The consensus step on the public copies, with the round's changes applied.
    ctx_.peers->InNeighbours(ctx_.self, round_, &in_);
    const float w = static_cast<float>(gamma_ / (1.0 + static_cast<double>(in_.size())));
    std::span<float> x = half_step_.data();
    std::span<const float> mine = own_copy_.data();
    for (NodeId j : in_) {
      std::span<const float> theirs = CopyOf(j).data();
      for (size_t k = 0; k < x.size(); ++k) x[k] += w * (theirs[k] - mine[k]);
    }
    x_ = std::make_shared<const ModelState>(std::move(half_step_));
    ++round_;
    a.rounds_completed = 1;
    if (round_ < ctx_.total_rounds) {
      a.train = true;
      training_ = true;
    }
    return a;
  }

  const NodeContext ctx_;
  Rng rng_;
  const std::shared_ptr<const Codec> codec_;
  const std::string codec_name_;
  const double gamma_;
  const double wait_ms_;
  std::shared_ptr<const ModelState> x_;
  const ModelState zeros_;
  ModelState half_step_;                      // x after training, before the consensus step
  ModelState own_copy_;                       // x^_i
  std::map<NodeId, ModelState> copies_;       // x^_j of every in-neighbour heard from
  std::map<NodeId, uint64_t> heard_through_;  // per sender: 1 + the latest round heard of
  uint64_t round_;
  bool training_ = false, waiting_ = false;
  std::vector<NodeId> in_, out_;
};

}  // namespace

Result<std::unique_ptr<ProtocolFactory>> MakeChoco(StrategySpec& spec) {
  PLEXUS_ASSIGN_OR_RETURN(std::string codec_name, spec.GetString("codec", "int8"));
  PLEXUS_ASSIGN_OR_RETURN(double gamma, spec.GetDouble("gamma", 0.5));
  PLEXUS_ASSIGN_OR_RETURN(double wait_ms, spec.GetDouble("wait_ms", 30000.0));
  if (!(gamma > 0 && gamma <= 1)) return InvalidArgumentError("choco:gamma must be in (0, 1]");
  if (!(wait_ms > 0)) return InvalidArgumentError("choco:wait_ms must be positive");
  Result<std::unique_ptr<Codec>> made = MakeCodec(codec_name);
  if (!made.ok()) return InvalidArgumentError("choco:codec: " + made.status().message());
  std::shared_ptr<const Codec> codec = std::move(made).value();
  return MakeFactory(
      "choco(codec=" + codec_name + ",gamma=" + std::to_string(gamma) +
          ",wait_ms=" + std::to_string(static_cast<int64_t>(wait_ms)) + ")",
      "ring",
      [codec, codec_name, gamma, wait_ms](const NodeContext& ctx, std::shared_ptr<const ModelState> initial,
                                          NeighbourMerge*) -> std::unique_ptr<Protocol> {
        return std::make_unique<ChocoNode>(ctx, std::move(initial), codec, codec_name, gamma, wait_ms);
      },
      /*mixes_by_weight_only=*/true);
}

}  // namespace plexus::gossip
