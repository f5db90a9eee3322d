// libFuzzer target: the strategy and staleness specs (`--strategy`, `--staleness`), which reach the
// server from command lines and config files. Any text gives an error or a strategy that
// describes itself; none crashes.
#include <cstdint>
#include <string_view>

#include "aggregators/registry.h"
#include "aggregators/staleness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto agg = plexus::MakeAggregator(text, nullptr); agg.ok()) (void)(*agg)->Describe();
  if (auto rule = plexus::StalenessRule::Parse(text); rule.ok()) {
    (void)rule->Describe();
    for (uint64_t s : {0ull, 1ull, 1000ull, ~0ull}) (void)rule->Weight(s);
  }
  return 0;
}
