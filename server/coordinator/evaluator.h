// ModelEvaluator: how an engine scores a newly published model (e.g. accuracy on a held-out
// test set). The coordinator only sees this interface; the LibTorch-backed implementation lives
// in compute/. Implementations need not be thread-safe: engines call them from their own thread.
#pragma once

#include "core/evaluation.h"
#include "core/model_state.h"
#include "core/status.h"

namespace plexus {

class ModelEvaluator {
 public:
  virtual ~ModelEvaluator() = default;
  virtual Result<Evaluation> Evaluate(const ModelState& model) = 0;
};

}  // namespace plexus
