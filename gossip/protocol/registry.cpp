#include "gossip/protocol/registry.h"

#include "aggregators/registry.h"

namespace plexus::gossip {

// One line per algorithm: its name and the Make function defined in the algorithm's own file.
#define PLEXUS_GOSSIP_ALGORITHMS(X)             \
  X("dpsgd", MakeDpsgd)                         \
  X("el", MakeEpidemic)                         \
  X("pushsum", MakePushSum)                     \
  X("semidecentralized", MakeSemiDecentralized) \
  X("choco", MakeChoco)                         \
  X("crdt", MakeCrdtGossip)                     \
  X("diloco", MakeDiLoCoGossip)                 \
  X("demo", MakeDeMoGossip)

#define PLEXUS_DECLARE_MAKER(name, maker) Result<std::unique_ptr<ProtocolFactory>> maker(StrategySpec&);
PLEXUS_GOSSIP_ALGORITHMS(PLEXUS_DECLARE_MAKER)
#undef PLEXUS_DECLARE_MAKER

namespace {

struct Entry {
  const char* name;
  Result<std::unique_ptr<ProtocolFactory>> (*make)(StrategySpec&);
};
#define PLEXUS_ENTRY(name, maker) Entry{name, &maker},
constexpr Entry kAlgorithms[] = {PLEXUS_GOSSIP_ALGORITHMS(PLEXUS_ENTRY)};
#undef PLEXUS_ENTRY

Status GossipError(const Status& s) { return InvalidArgumentError("--gossip: " + s.message()); }

}  // namespace

std::vector<std::string> GossipNames() {
  std::vector<std::string> names;
  for (const Entry& e : kAlgorithms) names.emplace_back(e.name);
  return names;
}

Result<std::unique_ptr<ProtocolFactory>> MakeGossip(std::string_view gossip_spec, std::string_view merge_spec) {
  auto parsed = StrategySpec::Parse(gossip_spec);
  if (!parsed.ok()) return GossipError(parsed.status());
  StrategySpec spec = std::move(parsed).value();
  for (const Entry& e : kAlgorithms) {
    if (spec.name() != e.name) continue;
    auto factory = e.make(spec);
    if (!factory.ok()) return GossipError(factory.status());
    if (Status s = spec.CheckAllUsed(); !s.ok()) return GossipError(s);
    PLEXUS_ASSIGN_OR_RETURN(std::unique_ptr<NeighbourMerge> merge, MakeNeighbourMerge(merge_spec));
    if ((*factory)->uses_replicas()) {
      // The replicas are resolved by an aggregators strategy, not a neighbour merge rule.
      auto strategy = MakeAggregator(CrdtStrategy(std::string(merge_spec)), nullptr);
      if (!strategy.ok()) {
        return InvalidArgumentError("--merge: " + spec.name() + " resolves its replicas with a strategy of the " +
                                    "aggregators registry (mean, median, trimmed_mean:beta=B, ...), not " +
                                    std::string(merge_spec) + ": " + strategy.status().message());
      }
    }
    if ((*factory)->mixes_by_weight_only() && !merge->linear()) {
      return InvalidArgumentError("--merge: " + spec.name() + " mixes by weights only, so it takes --merge mean, not " +
                                  std::string(merge_spec));
    }
    (*factory)->set_merge(std::move(merge), std::string(merge_spec));
    return std::move(factory).value();
  }
  std::string known;
  for (const std::string& n : GossipNames()) known += (known.empty() ? "" : ", ") + n;
  return InvalidArgumentError("--gossip: unknown algorithm '" + spec.name() + "' (known: " + known + ")");
}

}  // namespace plexus::gossip
