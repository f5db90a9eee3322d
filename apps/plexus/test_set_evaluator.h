// TestSetEvaluator: the coordinator's ModelEvaluator backed by a Trainer and a held-out data
// set. Borrows both. Single-threaded.
#pragma once

#include "compute/trainer.h"
#include "server/coordinator/evaluator.h"

namespace plexus::cli {

class TestSetEvaluator final : public ModelEvaluator {
 public:
  TestSetEvaluator(Trainer* trainer, DatasetView test) : trainer_(trainer), test_(std::move(test)) {}
  Result<Evaluation> Evaluate(const ModelState& model) override { return trainer_->Evaluate(model, test_); }

 private:
  Trainer* const trainer_;
  const DatasetView test_;
};

}  // namespace plexus::cli
