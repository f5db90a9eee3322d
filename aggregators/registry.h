// The strategy registry: builds an Aggregator from a strategy string such as "fedavg" or
// "fedavg:weighted=false". Stateless; thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "aggregators/aggregator.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace plexus {

// InvalidArgument for an unknown name (listing the known ones) or bad parameters.
// `pool` may be null (single-threaded); when given it must outlive the aggregator.
Result<std::unique_ptr<Aggregator>> MakeAggregator(std::string_view spec, ThreadPool* pool);

// Registered strategy names, sorted.
std::vector<std::string> StrategyNames();

}  // namespace plexus
