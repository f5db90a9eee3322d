// SkipAbseilDeadlockDetection: turns off Abseil's lock-order checking for the whole process.
// Debian builds Abseil without NDEBUG, so every absl::Mutex that gRPC takes is also recorded in
// a process-wide lock graph (absl::synchronization_internal::GraphCycles), a debugging aid that
// cost 1-3% of the CPU of the server and of a process of busy clients. Idempotent; thread-safe.
#pragma once
#include <absl/synchronization/mutex.h>

namespace plexus {

inline void SkipAbseilDeadlockDetection() { absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore); }

}  // namespace plexus
