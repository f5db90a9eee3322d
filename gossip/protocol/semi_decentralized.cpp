// Semi-decentralized learning (Rodio, Neglia, Chen, Larsson 2025): D-PSGD inside the graph, and
// every H rounds a server averages the models of K nodes sampled for that round; the average goes
// back to the sampled nodes only (S2S, mode=s2s, the default) or to every node (S2A, mode=s2a).
// Which nodes are sampled at round t is a seeded function every node and the server compute
// alike (a public random beacon), so nobody has to be told. A sampled node uploads its merged
// model and waits for the server's answer; with S2A every node waits. Waits end after wait_ms
// whatever happens (a sampled node that left, a lost message): the node goes on with its own.
// The server is one more Protocol (node id N), averaging through the aggregators registry
// (fedavg:weighted=false, a plain mean of the models, as deltas from the first to arrive).
#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "aggregators/registry.h"
#include "gossip/protocol/dpsgd.h"
#include "gossip/protocol/registry.h"

namespace plexus::gossip {
namespace {

struct ServerSchedule {
  uint64_t every = 5;
  size_t sample = 4;
  bool to_all = false;
  uint64_t seed = 0;

  bool ServerRound(uint64_t round) const { return (round + 1) % every == 0; }
  // The nodes sampled at `round`, sorted: K of N drawn from the seed.
  std::vector<NodeId> Sampled(uint64_t round, size_t nodes) const {
    std::vector<NodeId> all(nodes);
    std::iota(all.begin(), all.end(), NodeId{0});
    Rng rng = Rng::Derive(seed ^ 0x5e3d0ULL, round);
    const size_t k = std::min(sample, nodes);
    for (size_t i = 0; i < k; ++i) std::swap(all[i], all[i + rng.Below(nodes - i)]);
    all.resize(k);
    std::sort(all.begin(), all.end());
    return all;
  }
};

class SemiDecentralizedNode final : public Dpsgd {
 public:
  SemiDecentralizedNode(const NodeContext& ctx, std::shared_ptr<const ModelState> initial, NeighbourMerge* merge,
                        double wait_ms, ServerSchedule schedule)
      : Dpsgd(ctx, std::move(initial), merge, wait_ms), schedule_(schedule) {}

 private:
  bool AwaitsServer(uint64_t round, Actions* a) override {
    if (!schedule_.ServerRound(round)) return false;
    const std::vector<NodeId> sampled = schedule_.Sampled(round, ctx_.nodes);
    const bool in_sample = std::binary_search(sampled.begin(), sampled.end(), ctx_.self);
    if (in_sample) a->sends.push_back({ctx_.server, Message{Message::Kind::kModel, round, model(), 0.0, 0}});
    return in_sample || schedule_.to_all;
  }

  const ServerSchedule schedule_;
};

class SamplingServer final : public Protocol {
 public:
  SamplingServer(const NodeContext& ctx, ServerSchedule schedule, double wait_ms)
      : ctx_(ctx), schedule_(schedule), wait_ms_(wait_ms), mean_(*MakeAggregator("fedavg:weighted=false", nullptr)) {}

  Actions Start(bool) override { return {}; }
  Actions OnTrained(ModelState) override { return {}; }
  Actions OnPeerLeft(NodeId) override { return {}; }
  Actions Leave() override { return {}; }
  std::shared_ptr<const ModelState> model() const override { return last_; }
  uint64_t rounds_completed() const override { return 0; }  // the server takes no gossip rounds

  Actions OnMessage(NodeId from, const Message& m) override {
    if (m.kind != Message::Kind::kModel || !m.model || !schedule_.ServerRound(m.round) || done_.count(m.round))
      return {};
    const std::vector<NodeId> sampled = schedule_.Sampled(m.round, ctx_.nodes);
    if (!std::binary_search(sampled.begin(), sampled.end(), from)) return {};
    Round& r = rounds_[m.round];
    if (!r.models.empty() && (!m.model->CheckSameLayout(*r.models[0]).ok() || !m.model->CheckFinite().ok())) return {};
    if (std::find(r.from.begin(), r.from.end(), from) != r.from.end()) return {};
    r.from.push_back(from);
    r.models.push_back(m.model);
    Actions a;
    if (r.models.size() == 1) a.timers.push_back({m.round, wait_ms_});
    size_t live = 0;
    for (NodeId j : sampled) live += ctx_.peers->IsLive(j) ? 1 : 0;
    if (r.models.size() >= live) a.Append(Publish(m.round));
    return a;
  }

  Actions OnTimer(uint64_t round) override {
    if (!rounds_.count(round)) return {};
    return Publish(round);
  }

 private:
  struct Round {
    std::vector<NodeId> from;
    std::vector<std::shared_ptr<const ModelState>> models;
  };

  Actions Publish(uint64_t round) {
    Round r = std::move(rounds_[round]);
    rounds_.erase(round);
    done_.insert(round);
    while (done_.size() > 64) done_.erase(done_.begin());
    Actions a;
    const ModelState& base = *r.models[0];
    std::vector<Update> updates(r.models.size());
    std::vector<const Update*> pointers;
    for (size_t i = 0; i < r.models.size(); ++i) {
      updates[i].delta = *r.models[i];
      updates[i].delta.Subtract(base);
      updates[i].num_examples = 1;
      pointers.push_back(&updates[i]);
    }
    Result<ModelState> average = mean_->Aggregate(base, pointers);
    if (!average.ok()) return a;  // (cannot happen on checked inputs) the nodes' timers end their wait
    average->set_version(round);
    last_ = std::make_shared<const ModelState>(std::move(average).value());
    std::vector<NodeId> to;
    if (schedule_.to_all) {
      for (NodeId j = 0; j < ctx_.nodes; ++j) {
        if (ctx_.peers->IsLive(j)) to.push_back(j);
      }
    } else {
      to = r.from;
    }
    for (NodeId j : to) a.sends.push_back({j, Message{Message::Kind::kModelReply, round, last_, 0.0, 0}});
    return a;
  }

  const NodeContext ctx_;
  const ServerSchedule schedule_;
  const double wait_ms_;
  std::unique_ptr<Aggregator> mean_;
  std::map<uint64_t, Round> rounds_;
  std::set<uint64_t> done_;
  std::shared_ptr<const ModelState> last_;
};

}  // namespace

Result<std::unique_ptr<ProtocolFactory>> MakeSemiDecentralized(StrategySpec& spec) {
  ServerSchedule schedule;
  PLEXUS_ASSIGN_OR_RETURN(int64_t every, spec.GetCount("every", 5));
  PLEXUS_ASSIGN_OR_RETURN(int64_t sample, spec.GetCount("sample", 4));
  PLEXUS_ASSIGN_OR_RETURN(std::string mode, spec.GetString("mode", "s2s"));
  PLEXUS_ASSIGN_OR_RETURN(double wait_ms, spec.GetDouble("wait_ms", 30000.0));
  if (every < 1) return InvalidArgumentError("semidecentralized:every must be at least 1");
  if (sample < 1) return InvalidArgumentError("semidecentralized:sample must be at least 1");
  if (mode != "s2s" && mode != "s2a") return InvalidArgumentError("semidecentralized:mode is s2s or s2a");
  if (!(wait_ms > 0)) return InvalidArgumentError("semidecentralized:wait_ms must be positive");
  schedule.every = static_cast<uint64_t>(every);
  schedule.sample = static_cast<size_t>(sample);
  schedule.to_all = mode == "s2a";
  const std::string description =
      "semidecentralized(every=" + std::to_string(every) + ",sample=" + std::to_string(sample) + ",mode=" + mode + ")";
  PLEXUS_ASSIGN_OR_RETURN(
      std::unique_ptr<ProtocolFactory> factory,
      MakeFactory(description, "regular:d=4",
                  [schedule, wait_ms](const NodeContext& ctx, std::shared_ptr<const ModelState> initial,
                                      NeighbourMerge* merge) -> std::unique_ptr<Protocol> {
                    ServerSchedule s = schedule;
                    s.seed = ctx.seed;
                    return std::make_unique<SemiDecentralizedNode>(ctx, std::move(initial), merge, wait_ms, s);
                  }));
  factory->set_server_maker([schedule, wait_ms](const NodeContext& ctx) -> std::unique_ptr<Protocol> {
    ServerSchedule s = schedule;
    s.seed = ctx.seed;
    return std::make_unique<SamplingServer>(ctx, s, wait_ms);
  });
  return factory;
}

}  // namespace plexus::gossip
