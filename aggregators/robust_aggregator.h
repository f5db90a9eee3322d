// RobustAggregator: the common frame of rules that need every update at once (Krum, median,
// trimmed mean, Bulyan, geometric median, centered clipping, median-norm bounding). Fold buffers
// the validated delta; Finalize hands the updates, sorted by client id, to the rule, which
// returns the aggregated delta (or an error naming a violated precondition).
// Memory: n x model. Thread-compatible.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "aggregators/aggregator.h"
#include "aggregators/update_buffer.h"
#include "core/thread_pool.h"

namespace plexus {

// The most iterations an iterative rule (centered_clip, geomed) may be given: each reads every
// update, so a mistyped count (iters=1000000000000) would hold a round for days instead of
// failing at start; the published settings use 1-5 (centered clipping) and 100 (geomed, which
// also stops once converged).
inline constexpr int64_t kMaxRobustIterations = 1000;

// Computes the aggregated delta from the sorted updates.
using RobustRule = std::function<Result<std::vector<double>>(std::span<const BufferedUpdate>, ThreadPool*)>;

// `min_updates`: the fewest updates the rule accepts (Aggregator::min_updates).
std::unique_ptr<Aggregator> MakeRobust(std::string description, RobustRule rule, ThreadPool* pool,
                                       size_t min_updates = 1);

// Message for a violated precondition: "krum needs n > 2f + 2 updates (got n=4 with f=1)".
Status PreconditionFailed(const std::string& strategy, const std::string& condition, size_t n, int64_t f);

}  // namespace plexus
