// FedBuffBuffer: the buffer of FedBuff (Nguyen et al., AISTATS 2022). Each arriving delta is
// scaled by s(staleness) and folded into a merge strategy (any Aggregator; with
// "fedavg:weighted=false" this is exactly the paper's B / K); once `buffer_size` updates are in,
// Flush() applies x + server_lr * (merged - x). The asynchronous engine decides when to call it.
// Owns its merge aggregator. Thread-compatible.
#pragma once

#include <memory>

#include "aggregators/aggregator.h"
#include "aggregators/staleness.h"
#include "core/status.h"

namespace plexus {

struct FedBuffOptions {
  int64_t buffer_size = 10;  // K: updates per published version
  double server_lr = 1.0;    // eta_g

  Status Validate() const;
};

class FedBuffBuffer {
 public:
  // InvalidArgument for bad options.
  static Result<std::unique_ptr<FedBuffBuffer>> Create(const FedBuffOptions& options, StalenessRule staleness,
                                                       std::unique_ptr<Aggregator> merge);

  Status Begin(const ModelState& base);
  // Folds the staleness-weighted update (weighted in place: the buffer takes it); returns true
  // when the buffer is full. A refused update (see Aggregator::Fold) leaves the buffer unchanged.
  Result<bool> Add(Update update, uint64_t staleness);
  size_t size() const { return merge_->num_folded(); }
  // Whether Add takes updates with coded values (the merge strategy folds them).
  bool folds_coded() const { return merge_->folds_coded(); }
  // The merge strategy's MayContribute, SaveState and RestoreState.
  bool MayContribute(const std::string& client_id, uint64_t base_version) const {
    return merge_->MayContribute(client_id, base_version);
  }
  std::string SaveState() const { return merge_->SaveState(); }
  Status RestoreState(std::string_view state) { return merge_->RestoreState(state); }
  // The new model; FailedPrecondition when the buffer is empty. Call Begin() before the next Add.
  Result<ModelState> Flush();

 private:
  FedBuffBuffer(const FedBuffOptions& o, StalenessRule s, std::unique_ptr<Aggregator> m)
      : options_(o), staleness_(s), merge_(std::move(m)) {}

  const FedBuffOptions options_;
  const StalenessRule staleness_;
  std::unique_ptr<Aggregator> merge_;
  ModelState base_;  // the version the buffer started from; kept only when server_lr != 1
};

}  // namespace plexus
