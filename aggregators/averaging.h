// The averaging family: a weighted mean of the (optionally transformed) client deltas, folded as
// updates arrive (O(model) memory), handed to a ServerOptimizer. FedAvg, FedAvgM, FedNova, the
// FedOpt optimizers and fixed-radius norm bounding are all this one aggregator with different
// settings; their factories live in averaging.cpp and norm_bound.cpp.
#pragma once

#include <memory>
#include <string>

#include "aggregators/aggregator.h"
#include "aggregators/server_optimizer.h"
#include "core/thread_pool.h"

namespace plexus {

class StrategySpec;

struct AveragingOptions {
  std::string name;      // for Describe() and messages
  std::string params;    // settings for Describe(), e.g. "weighted=true"
  bool weighted = true;  // weight by examples (else uniform)
  // FedNova (Wang et al., NeurIPS 2020): fold delta_i / tau_i and scale the mean by
  // tau_eff = sum_i p_i tau_i, where tau_i is the client's local step count.
  bool normalize_by_steps = false;
  double clip_norm = 0.0;  // > 0: scale each delta to at most this L2 norm first
};

std::unique_ptr<Aggregator> MakeAveraging(AveragingOptions options, std::unique_ptr<ServerOptimizer> step,
                                          ThreadPool* pool);
// The same with the sum kept as an ExactSum (the strategies' `exact=true`, exact_fedavg.cpp): the
// same model bits in any arrival order, and edges' partial sums taken (a root of edge aggregators,
// docs/deployment.md). REQUIRES: !options.normalize_by_steps (FedNova's step counts are not summed).
// MakeAveraging, or MakeExactAveraging when `spec` says `exact=true` (its description then starts
// with it): the one place the averaging family's factories read that setting.
Result<std::unique_ptr<Aggregator>> AveragingFrom(StrategySpec& spec, AveragingOptions options,
                                                  std::unique_ptr<ServerOptimizer> step, ThreadPool* pool);

std::unique_ptr<Aggregator> MakeExactAveraging(AveragingOptions options, std::unique_ptr<ServerOptimizer> step,
                                               ThreadPool* pool);

}  // namespace plexus
