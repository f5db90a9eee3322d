// ArrivalPolicy: how an asynchronous engine turns accepted updates into versions. The engine
// checks, logs and acknowledges each update, then hands it to its policy, which folds it into
// the version being built at once or holds it, and says when that version is published:
//   - FedBuff (MakeBufferArrivals): every update is folded as it arrives; a version is published
//     every `buffer_size` folded updates (FedAsync with a buffer of one);
//   - FedCompass (CompassArrivals, compass_arrivals.h): tasks get local steps from a
//     CompassScheduler; arrivals are held per group and a group is folded and published when its
//     last member arrives or its latest time passes.
// Policies act on the engine only through VersionBuilder. Single-threaded (owned by an engine,
// called under its caller's serialization).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/status.h"
#include "server/coordinator/engine.h"
#include "server/coordinator/mode.h"
#include "server/store/store.h"

namespace plexus {

// The side of the engine a policy drives: the version being built.
class VersionBuilder {
 public:
  virtual ~VersionBuilder() = default;
  // Folds the accepted update (with its log entry) into the version being built, with `group`
  // (0 for none) in its record. A refused fold is counted by the engine and returned.
  virtual Status Fold(LoggedUpdate accepted, uint64_t group) = 0;
  // Publishes the version being built. The last version's publication first asks the policy
  // to fold everything it holds (ArrivalPolicy::FoldAllHeld).
  virtual Status Publish() = 0;
  // Updates folded into the version being built.
  virtual size_t folded() const = 0;
  virtual bool finished() const = 0;
};

class ArrivalPolicy {
 public:
  virtual ~ArrivalPolicy() = default;

  virtual Mode mode() const = 0;
  // "fedbuff(buffer=...)" or "fedcompass(...)", around the given staleness, server_lr and merge
  // descriptions.
  virtual std::string Describe(const std::string& settings) const = 0;
  // How many updates the version buffer may hold before the engine would publish on its own
  // (the buffer's capacity).
  virtual int64_t buffer_capacity() const = 0;
  // Whether updates must report their example counts (the scheduler weighs them).
  virtual bool needs_examples() const { return false; }

  // The local steps of `client`'s new task, issued at now_ms (`configured` unless the policy
  // chooses).
  virtual int64_t StepsFor(const std::string& client, int64_t configured, int64_t now_ms) = 0;
  // The client's task ended without an update (refused or timed out).
  virtual void Abandon(const std::string& client) = 0;
  // An accepted, logged update arrived at now_ms.
  virtual Status Arrive(LoggedUpdate accepted, int64_t now_ms, VersionBuilder* builder) = 0;
  // At open: a logged update the previous process had acknowledged (neither held nor grouped:
  // folded again), then RestoreDone once all are.
  virtual Status Restore(LoggedUpdate accepted, VersionBuilder* builder) = 0;
  virtual Status RestoreDone(VersionBuilder* builder) = 0;
  // Publishes what is due at now_ms (groups whose latest time passed).
  virtual Status Tick(int64_t now_ms, VersionBuilder* builder) = 0;
  // Folds every update the policy holds: the federation's last version takes them all, as no
  // later version would.
  virtual void FoldAllHeld(VersionBuilder* builder) = 0;

  // Updates held and not yet folded.
  virtual size_t held() const { return 0; }
  // The client's speed estimate (ms per local step), for the version's record, when known.
  virtual std::optional<double> SpeedOf(const std::string&) const { return std::nullopt; }
  // Every client's schedule, for the engine's status (empty when the policy keeps none).
  virtual std::vector<ClientSchedule> Schedule() const { return {}; }
};

// FedBuff's policy: fold at once, publish every `buffer_size` folded updates.
std::unique_ptr<ArrivalPolicy> MakeBufferArrivals(int64_t buffer_size);

}  // namespace plexus
