#include "aggregators/dp_release.h"

#include <cmath>
#include <cstdlib>
#include <string>

namespace plexus {

Result<DpRelease> ReadDpRelease(StrategySpec& spec, const char* strategy) {
  auto check = [strategy](bool ok, const char* what) {
    return ok ? Status::Ok() : InvalidArgumentError("strategy '" + std::string(strategy) + "': " + what);
  };
  DpRelease r;
  PLEXUS_ASSIGN_OR_RETURN(r.clip, spec.GetDouble("clip", 0));
  PLEXUS_ASSIGN_OR_RETURN(r.noise, spec.GetDouble("noise", -1));
  PLEXUS_ASSIGN_OR_RETURN(r.expected, spec.GetDouble("expected", 0));
  PLEXUS_ASSIGN_OR_RETURN(r.lr, spec.GetDouble("lr", 1));
  PLEXUS_ASSIGN_OR_RETURN(std::string seed, spec.GetString("seed", ""));
  PLEXUS_RETURN_IF_ERROR(check(r.clip > 0 && std::isfinite(r.clip), "clip must be a positive number"));
  PLEXUS_RETURN_IF_ERROR(check(r.noise >= 0 && std::isfinite(r.noise), "noise must be given, at least 0"));
  PLEXUS_RETURN_IF_ERROR(check(r.expected >= 1 && std::isfinite(r.expected),
                               "expected (updates per release, the fixed denominator) must be at least 1"));
  PLEXUS_RETURN_IF_ERROR(check(r.lr > 0 && std::isfinite(r.lr), "lr must be positive"));
  if (!seed.empty()) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(seed.c_str(), &end, 10);
    PLEXUS_RETURN_IF_ERROR(check(*end == '\0' && seed[0] != '-', "seed must be a non-negative integer"));
    r.seed = v;
  }
  return r;
}

}  // namespace plexus
