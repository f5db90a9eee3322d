// Aggregator: the plug-in seam for merge rules. One aggregation is Begin(base), any number of
// Fold(update), then Finalize(). Fold never mutates its input; an update it refuses (wrong
// layout, non-finite values, bad weight) leaves the aggregation exactly as it was.
// Client sampling, deadlines and staleness belong to the coordinator engines, not here.
// A new strategy is one .cpp file plus one line in registry.cpp.
// Thread-compatible: one aggregation is driven by one thread (it may use a ThreadPool inside).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/model_state.h"
#include "core/status.h"
#include "core/update.h"

namespace plexus {

class ExactSum;

class Aggregator {
 public:
  virtual ~Aggregator() = default;

  // Starts a new aggregation on top of `base`, dropping any previous one.
  virtual Status Begin(const ModelState& base) = 0;

  // Folds one client's delta. InvalidArgument when its layout differs from the base, it holds
  // non-finite values, or its weight is not positive. FailedPrecondition before Begin.
  virtual Status Fold(const Update& update) = 0;

  // Folds value_scale x update.delta (FedBuff's staleness weight), with Fold's checks and
  // errors. The caller gives the update up: by default its values are scaled in place, then
  // folded; strategies linear in the values (the averaging family) fold the factor into the
  // update's weight instead, which spares a pass over the update.
  // REQUIRES: value_scale finite and positive.
  virtual Status FoldScaled(Update& update, double value_scale);

  // FoldScaled(update, value_scale), with its checks and errors now, for a caller that gives the
  // update up: a strategy may hold it and fold it later together with others (the averaging
  // family folds four held updates per pass over its running sum, a quarter of the sum's traffic
  // per update, and never changes them). Held updates count in num_folded() and are folded, in
  // order, before any other fold or Finalize. By default: FoldScaled.
  virtual Status FoldShared(std::shared_ptr<Update> update, double value_scale);

  // Folds several updates in order, as Fold would, and stops at the first one refused: those
  // before it stay folded, it and the rest are not, and its error is returned. Strategies may
  // override it with a faster path that reads each input once for the whole batch.
  virtual Status FoldAll(std::span<const Update* const> updates);

  // The fewest updates Finalize can aggregate with these settings (Krum and Multi-Krum: 2f + 3,
  // Bulyan: 4f + 3; 1 for the rest). Engines refuse at start settings that could close a round
  // with fewer, instead of failing at the first one.
  virtual size_t min_updates() const { return 1; }

  // Whether Fold takes updates that carry coded values (Update::coded, empty delta): the
  // averaging family folds them from their codes. Others must be given float32 deltas.
  virtual bool folds_coded() const { return false; }

  // Whether Finalize depends on the folded updates only through their weighted mean, so that one
  // update carrying that mean (a secure aggregation group's) publishes the same version: the
  // averaging family without per-update clipping. Strategies that look at each update (robust
  // ones, clipping, DP) do not.
  virtual bool takes_the_mean() const { return false; }

  // Whether an update from `client_id` trained on version `base_version` would be folded now:
  // false only where the strategy caps contributions (DP-FTRL: m per client and tree). Engines
  // hand tasks only to such clients; Fold still refuses the others.
  virtual bool MayContribute(const std::string& client_id, uint64_t base_version) const {
    (void)client_id;
    (void)base_version;
    return true;
  }

  // The exact sum of what was folded since Begin (empty before), for strategies that keep one
  // (fedavg_exact): what an edge aggregator sends its parent instead of finalizing (plexus server
  // --upstream). Null for the others.
  virtual const ExactSum* partial_sum() const { return nullptr; }
  // With partial_sum(): whether Finalize publishes base + the sum's mean (no server optimizer
  // after it), so that an edge aggregator may send the sum in its place and leave any step to the
  // root. False for fedadam:exact=true and the like, which only a root may run.
  virtual bool finalizes_to_the_mean() const { return false; }
  // Whether edges' partial sums (aggregators/partial_sum_delta.h) may be folded: the strategies
  // that keep exact sums, and dp_fedavg (central DP at a root over sums its edges clipped).
  virtual bool takes_partial_sums() const { return partial_sum() != nullptr; }

  // Number of updates folded since Begin.
  virtual size_t num_folded() const = 0;

  // The new model: base plus the aggregated delta, with version base.version() + 1.
  // FailedPrecondition when nothing was folded.
  virtual Result<ModelState> Finalize() = 0;

  // One whole aggregation: Begin(base), FoldAll(updates), Finalize() as one call, with the same
  // result bits and errors. For callers that hold every update at once (offline merges, batch
  // rounds); strategies may override it with a path that writes the new model block by block
  // while reading the inputs, without model-sized intermediates.
  virtual Result<ModelState> Aggregate(const ModelState& base, std::span<const Update* const> updates);

  // The strategy and its settings, e.g. "fedavg(weighted=true)", for logs and result files.
  virtual std::string Describe() const = 0;

  // What the strategy carries from one aggregation to the next (server optimizer moments), as
  // bytes that the coordinator commits with each round, so that a restarted server continues
  // where it stopped; empty for stateless strategies. RestoreState takes what SaveState gave:
  // empty bytes leave the strategy fresh; InvalidArgument for the state of another strategy or
  // model size (the strategy is unchanged then).
  virtual std::string SaveState() const { return {}; }
  virtual Status RestoreState(std::string_view state);
};

}  // namespace plexus
