#include "python/python_trainer.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cmath>
#include <utility>

namespace plexus::python {
namespace py = pybind11;

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

namespace {

// What a Python exception says, in one line: its type and message.
std::string Describe(const py::error_already_set& e) {
  std::string what = e.what();
  if (const size_t end = what.find('\n'); end != std::string::npos) what.resize(end);
  return what;
}

}  // namespace

PythonTrainer::PythonTrainer(py::function train, py::object evaluate, std::shared_ptr<BindingTimes> times)
    : train_(std::move(train)), evaluate_(std::move(evaluate)), times_(std::move(times)) {}

PythonTrainer::~PythonTrainer() {
  py::gil_scoped_acquire gil;  // the references are dropped with the GIL held
  train_ = py::function();
  evaluate_ = py::object();
}

py::list ArrayViewsOf(const ModelState& model) {
  py::list arrays;
  // The arrays' base: an object that owns nothing, so NumPy neither copies nor frees the memory.
  py::capsule no_owner(&model, [](void*) {});
  for (size_t i = 0; i < model.tensors().size(); ++i) {
    const TensorSlot& t = model.tensors()[i];
    std::vector<py::ssize_t> shape(t.shape.begin(), t.shape.end());
    py::array_t<float> a(shape, model.tensor(i).data(), no_owner);
    a.attr("setflags")(py::arg("write") = false);
    arrays.append(std::move(a));
  }
  return arrays;
}

Status CopyArraysInto(const py::handle& arrays, ModelState* out) {
  if (!py::isinstance<py::sequence>(arrays) || py::isinstance<py::str>(arrays)) {
    return AbortedError("the training function returned no list of arrays");
  }
  const auto list = py::reinterpret_borrow<py::sequence>(arrays);
  if (list.size() != out->tensors().size()) {
    return AbortedError("the training function returned " + std::to_string(list.size()) + " arrays for a model of " +
                        std::to_string(out->tensors().size()) + " tensors");
  }
  for (size_t i = 0; i < out->tensors().size(); ++i) {
    const TensorSlot& t = out->tensors()[i];
    auto a = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(list[i]);
    if (!a) return AbortedError("tensor " + t.name + " came back as something that is not an array of numbers");
    std::vector<int64_t> shape(a.shape(), a.shape() + a.ndim());
    if (shape != t.shape) {
      return AbortedError("tensor " + t.name + " came back with shape " + ShapeText(shape) + " where the model has " +
                          ShapeText(t.shape));
    }
    const float* src = a.data();
    std::span<float> dst = out->tensor(i);
    bool finite = true;
    for (size_t k = 0; k < dst.size(); ++k) {
      dst[k] = src[k];
      finite &= std::isfinite(src[k]);
    }
    if (!finite) return AbortedError("tensor " + t.name + " came back holding NaN or infinite values");
  }
  return Status::Ok();
}

Result<TrainOutcome> PythonTrainer::Train(const ModelState& start, const DatasetView&, const TrainOptions& options) {
  // The device policy (ClientOptions::device_blocked) pauses a native trainer at any step; a
  // Python loop's steps are its own, so it waits once, before the loop starts (without the GIL:
  // the policy's own function takes it).
  if (options.before_step) PLEXUS_RETURN_IF_ERROR(options.before_step(0));
  py::gil_scoped_acquire gil;
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  const auto started = Clock::now();
  try {
    py::dict task;
    task["task_id"] = options.task_id;
    task["round"] = options.round;
    task["local_steps"] = options.local_steps;
    task["local_epochs"] = options.local_epochs;
    task["batch_size"] = options.batch_size;
    task["learning_rate"] = options.learning_rate;
    task["momentum"] = options.momentum;
    task["optimizer"] = options.optimizer;
    task["weight_decay"] = options.weight_decay;
    task["seed"] = options.seed;
    task["config"] = options.config;
    py::list views = ArrayViewsOf(start);
    const auto called = Clock::now();
    py::object r = train_(views, task);
    const auto returned = Clock::now();
    if (!py::isinstance<py::tuple>(r) || py::len(r) != 3) {
      return AbortedError("the training function returned no (examples, arrays, loss)");
    }
    const auto t = py::reinterpret_borrow<py::tuple>(r);
    TrainOutcome out;
    out.num_examples = t[0].cast<int64_t>();
    out.mean_loss = t[2].cast<double>();
    if (out.num_examples <= 0) return AbortedError("the training function trained on no examples");
    if (!std::isfinite(out.mean_loss)) return AbortedError("the training loss is not finite: training diverged");
    out.weights = ModelState::UninitializedLike(start);
    out.weights.set_version(start.version());
    PLEXUS_RETURN_IF_ERROR(CopyArraysInto(t[1], &out.weights));
    out.steps = options.local_steps;
    times_->native_s += seconds(called - started) + seconds(Clock::now() - returned);
    times_->call_s += seconds(returned - called);
    ++times_->tasks;
    return out;
  } catch (const py::error_already_set& e) {
    return AbortedError("the training function raised " + Describe(e));
  } catch (const py::cast_error& e) {
    return AbortedError(std::string("the training function returned something else than (examples, arrays, loss): ") +
                        e.what());
  }
}

Result<Evaluation> PythonTrainer::Evaluate(const ModelState& model, const DatasetView&) {
  py::gil_scoped_acquire gil;
  if (evaluate_.is_none()) return Evaluation{};
  try {
    py::object r = evaluate_(ArrayViewsOf(model));
    const auto t = r.cast<py::tuple>();
    if (t.size() != 3) return InvalidArgumentError("the evaluation function returned no (examples, loss, accuracy)");
    Evaluation e;
    e.examples = t[0].cast<int64_t>();
    e.loss = t[1].cast<double>();
    e.accuracy = t[2].cast<double>();
    return e;
  } catch (const py::error_already_set& e) {
    return InvalidArgumentError("the evaluation function raised " + Describe(e));
  } catch (const py::cast_error& e) {
    return InvalidArgumentError(std::string("the evaluation function returned something else than (examples, loss, "
                                            "accuracy): ") +
                                e.what());
  }
}

}  // namespace plexus::python
