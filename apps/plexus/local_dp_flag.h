// The clip and noise every --dp mechanism names, and `--dp local:clip=C,noise=Z`, read alike by `plexus client` (which
// clips and noises its updates) and `plexus server` (which refuses clients that announce anything else at join).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "aggregators/strategy_spec.h"
#include "apps/plexus/commands.h"
#include "client/client_runtime.h"
#include "privacy/rdp_accountant.h"

namespace plexus::cli {

struct LocalDp {
  double clip = 0;
  double noise = 0;
  std::string announced;  // "clip=C,noise=Z" as the client announces it at join
};

// clip=C (> 0) and noise=Z (>= 0) of any --dp mechanism; throws CommandError naming --dp.
inline void ReadClipAndNoise(StrategySpec& spec, double* clip, double* noise) {
  *clip = Take(spec.GetDouble("clip", 0), "--dp");
  *noise = Take(spec.GetDouble("noise", -1), "--dp");
  if (!(*clip > 0) || !std::isfinite(*clip)) throw CommandError("--dp: clip must be a positive number");
  if (!(*noise >= 0) || !std::isfinite(*noise)) {
    throw CommandError("--dp: noise must be given and at least 0 (the noise multiplier z)");
  }
}

inline bool IsLocalDp(const std::string& flag) { return flag.rfind("local:", 0) == 0; }

// Throws CommandError naming --dp for anything but local:clip=C,noise=Z with C > 0, Z ≥ 0.
inline LocalDp ParseLocalDp(const std::string& flag) {
  StrategySpec spec = Take(StrategySpec::Parse(flag), "--dp");
  if (spec.name() != "local") throw CommandError("--dp here must be local:clip=C,noise=Z (got '" + flag + "')");
  LocalDp dp;
  ReadClipAndNoise(spec, &dp.clip, &dp.noise);
  Check(spec.CheckAllUsed(), "--dp");
  dp.announced = LocalDpAnnouncement(dp.clip, dp.noise);
  return dp;
}

// What local DP costs one client that sent `releases` noised updates (plexus::LocalDpEpsilon).
inline double LocalDpEpsilon(const LocalDp& dp, int64_t releases) { return plexus::LocalDpEpsilon(dp.noise, releases); }

}  // namespace plexus::cli
