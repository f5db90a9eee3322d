// ModelEvaluator: how an engine scores a newly published model (e.g. accuracy on a held-out
// test set). The coordinator only sees this interface; the LibTorch-backed implementation lives
// in compute/. Implementations need not be thread-safe: engines call them from their own thread.
#pragma once

#include "core/model_state.h"
#include "core/status.h"

namespace plexus {

struct Evaluation {
  double accuracy = 0.0;  // fraction in [0, 1]
  double loss = 0.0;      // mean cross-entropy
  int64_t examples = 0;
};

class ModelEvaluator {
 public:
  virtual ~ModelEvaluator() = default;
  virtual Result<Evaluation> Evaluate(const ModelState& model) = 0;
};

}  // namespace plexus
