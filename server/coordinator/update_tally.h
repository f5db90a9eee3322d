// UpdateTally: the examples and the training losses of the updates merged into one version, as
// every engine reports them in the version's RoundRecord. Plain data.
#pragma once

#include <cstdint>

#include "core/round_record.h"
#include "core/update.h"

namespace plexus {

struct UpdateTally {
  int64_t examples = 0;
  double loss_sum = 0.0;
  int64_t loss_count = 0;  // updates that reported a "train_loss"

  // Counts the update's examples and its "train_loss", when it reported one.
  void Add(const Update& update) {
    examples += update.num_examples;
    if (auto it = update.metrics.find("train_loss"); it != update.metrics.end()) {
      loss_sum += it->second;
      ++loss_count;
    }
  }
  UpdateTally& operator+=(const UpdateTally& other) {
    examples += other.examples;
    loss_sum += other.loss_sum;
    loss_count += other.loss_count;
    return *this;
  }
  // Sets the record's num_examples and mean_train_loss (0 when no update reported a loss).
  void FillRecord(RoundRecord* record) const {
    record->num_examples = examples;
    record->mean_train_loss = loss_count ? loss_sum / static_cast<double>(loss_count) : 0.0;
  }
};

}  // namespace plexus
