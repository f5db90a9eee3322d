// PythonTrainer: the Trainer seam (compute/trainer.h) with a Python function behind it, so that a
// native client (client/client_runtime.h) trains with its user's own loop. Each task: the task's
// model goes to `train` as a list of NumPy arrays in the server's tensor order (read-only views of
// the model: no copy), with a dict describing the task; `train` returns (examples, arrays, loss)
// and the arrays are checked (one per tensor, the same shapes, every value finite) and copied
// into the trained model. What the function raises, and arrays that fail the checks, end that
// task with Aborted and the reason: the runtime drops the task and goes on with the next one.
// Evaluation (federated evaluation tasks) calls `evaluate` the same way, when given.
//
// Holds references to the functions; takes the GIL for each call, so the runtime runs with the
// GIL released. One per client runtime (its thread).
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <vector>

#include "compute/trainer.h"

namespace plexus::python {

// Where the binding's own time goes, over every task of a client: turning the model into arrays and
// the returned arrays into the trained model (native_s), against the time inside the Python
// training function (call_s, which holds the Python side's own loading and unloading too).
struct BindingTimes {
  double native_s = 0;
  double call_s = 0;
  int64_t tasks = 0;
};

class PythonTrainer final : public Trainer {
 public:
  // `evaluate` may be None; `times` (shared by the client's trainers) collects BindingTimes.
  PythonTrainer(pybind11::function train, pybind11::object evaluate, std::shared_ptr<BindingTimes> times);
  ~PythonTrainer() override;

  Result<TrainOutcome> Train(const ModelState& start, const DatasetView& data, const TrainOptions& options) override;
  Result<Evaluation> Evaluate(const ModelState& model, const DatasetView& data) override;

 private:
  pybind11::function train_;
  pybind11::object evaluate_;
  std::shared_ptr<BindingTimes> times_;
};

// A shape as Python writes it: (200, 784), (10,).
std::string ShapeText(const std::vector<int64_t>& shape);

// The model's tensors as read-only NumPy arrays that view its memory (valid while it lives), in
// its order. The GIL must be held.
pybind11::list ArrayViewsOf(const ModelState& model);

// Copies `arrays` (anything NumPy turns into float32 arrays, one per tensor) into `out`, which has
// the layout they must have. Aborted naming the first tensor of another shape, holding a NaN or an
// infinity, or missing. The GIL must be held.
Status CopyArraysInto(const pybind11::handle& arrays, ModelState* out);

}  // namespace plexus::python
