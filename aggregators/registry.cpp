#include "aggregators/registry.h"

#include <algorithm>

#include "aggregators/strategy_spec.h"

namespace plexus {

// One line per strategy: its name and the factory defined in the strategy's own file.
#define PLEXUS_STRATEGIES(X)           \
  X("fedavg", MakeFedAvg)              \
  X("fedavg_exact", MakeExactFedAvg)   \
  X("fedavgm", MakeFedAvgM)            \
  X("diloco", MakeDiLoCo)              \
  X("demo", MakeDeMo)                  \
  X("dp_fedavg", MakeDpFedAvg)         \
  X("dp_ftrl", MakeDpFtrl)             \
  X("fednova", MakeFedNova)            \
  X("fedadam", MakeFedAdam)            \
  X("fedyogi", MakeFedYogi)            \
  X("fedadagrad", MakeFedAdagrad)      \
  X("krum", MakeKrum)                  \
  X("multikrum", MakeMultiKrum)        \
  X("median", MakeMedian)              \
  X("trimmed_mean", MakeTrimmedMean)   \
  X("bulyan", MakeBulyan)              \
  X("geomed", MakeGeoMed)              \
  X("centered_clip", MakeCenteredClip) \
  X("norm_bound", MakeNormBound)       \
  X("ties", MakeTies)                  \
  X("dare", MakeDare)

using StrategyFactory = Result<std::unique_ptr<Aggregator>> (*)(StrategySpec&, ThreadPool*);
#define PLEXUS_DECLARE_FACTORY(name, factory) Result<std::unique_ptr<Aggregator>> factory(StrategySpec&, ThreadPool*);
PLEXUS_STRATEGIES(PLEXUS_DECLARE_FACTORY)
#undef PLEXUS_DECLARE_FACTORY

namespace {

struct Entry {
  const char* name;
  StrategyFactory factory;
};

#define PLEXUS_ENTRY(name, factory) Entry{name, &factory},
constexpr Entry kStrategies[] = {PLEXUS_STRATEGIES(PLEXUS_ENTRY)};
#undef PLEXUS_ENTRY

}  // namespace

std::vector<std::string> StrategyNames() {
  std::vector<std::string> names;
  for (const Entry& e : kStrategies) names.emplace_back(e.name);
  std::sort(names.begin(), names.end());
  return names;
}

Result<std::unique_ptr<Aggregator>> MakeAggregator(std::string_view text, ThreadPool* pool) {
  PLEXUS_ASSIGN_OR_RETURN(StrategySpec spec, StrategySpec::Parse(text));
  for (const Entry& e : kStrategies) {
    if (spec.name() != e.name) continue;
    PLEXUS_ASSIGN_OR_RETURN(std::unique_ptr<Aggregator> agg, e.factory(spec, pool));
    PLEXUS_RETURN_IF_ERROR(spec.CheckAllUsed());
    return agg;
  }
  std::string known;
  for (const std::string& n : StrategyNames()) known += (known.empty() ? "" : ", ") + n;
  return InvalidArgumentError("unknown strategy '" + spec.name() + "' (known: " + known + ")");
}

}  // namespace plexus
