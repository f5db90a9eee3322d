// _native: the compiled half of the Python package `plexus` (python/plexus/__init__.py is the half
// users call; docs/python.md). It binds the native client, ClientRuntime over gRPC with its state
// directory, TLS and codecs, to a training function written in Python (PythonTrainer): a thin
// binding over the client the `plexus client` command runs, not a second client.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "client/client_runtime.h"
#include "client/client_state_dir.h"
#include "client/grpc_transport.h"
#include "compute/model_zoo.h"
#include "compute/script_model.h"
#include "privacy/rdp_accountant.h"
#include "python/python_trainer.h"
#include "python/server_database.h"

namespace plexus::python {
namespace py = pybind11;
namespace {

using Layout = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// Whether `mine` (a model's names and shapes, in order; called `what`) has the layout of `theirs`
// (called `whose`): FailedPrecondition saying where they differ first, in one line. The check at a
// server's join and before a simulation with the user's loop (plexus.sim).
Status CompareLayouts(const Layout& mine, const std::string& what, const Layout& theirs, const std::string& whose) {
  for (size_t i = 0; i < std::max(theirs.size(), mine.size()); ++i) {
    if (i >= mine.size()) return FailedPreconditionError(what + " lacks " + theirs[i].first + " of " + whose);
    if (i >= theirs.size()) {
      return FailedPreconditionError(what + " has " + mine[i].first + ", which " + whose + " has not");
    }
    if (mine[i] != theirs[i]) {
      return FailedPreconditionError(what + "'s tensor " + std::to_string(i) + " is " + mine[i].first +
                                     ShapeText(mine[i].second) + " where " + whose + " has " + theirs[i].first +
                                     ShapeText(theirs[i].second));
    }
  }
  return Status::Ok();
}

// Whether a model of `layout` can take part in a federation of `announced` (the model name the
// server gives at join): FailedPrecondition saying how they differ, in one line.
Status CheckLayout(const Layout& layout, const std::string& announced) {
  std::vector<TensorSpec> specs;
  for (const auto& [name, shape] : layout) specs.push_back({name, shape});
  Result<ModelState> mine = ModelState::CreateUninitialized(specs);
  if (!mine.ok()) return FailedPreconditionError("the model's tensors: " + mine.status().message());
  if (IsScriptModelName(announced)) {
    const std::string name = ScriptModelNameOf(*mine);
    if (name == announced) return Status::Ok();
    return FailedPreconditionError("the model has another parameter layout (" + name +
                                   ") than the server's TorchScript model (" + announced +
                                   "): its parameters, then its floating-point buffers, must have the names and "
                                   "shapes of the server's model file");
  }
  Result<ModelState> theirs = InitModel(announced, 0);
  if (!theirs.ok()) {
    return FailedPreconditionError("the server federates " + announced + ", which this client does not know");
  }
  Layout want;
  for (const TensorSlot& t : theirs->tensors()) want.emplace_back(t.name, t.shape);
  return CompareLayouts(layout, "the model", want, "the server's " + announced);
}

// A view of `n` examples the Python side holds: the runtime reads only its size (what the client
// announces at join, and whether it answers evaluation tasks); PythonTrainer never reads through it.
DatasetView ExamplesHeldInPython(int64_t n) {
  DatasetView v;
  v.indices.resize(static_cast<size_t>(std::max<int64_t>(n, 0)));
  return v;
}

class NativeClient {
 public:
  NativeClient(std::string server, std::string ca_pem, std::string cert_pem, std::string key_pem, std::string token,
               std::string state_dir, std::string client_id, double give_up_s, uint64_t seed, int64_t examples,
               int64_t eval_examples, double poll_wait_s, double local_dp_clip, double local_dp_noise,
               double max_upload_kib_s, std::string save_updates_dir, py::object device_blocked, double device_check_s)
      : server_(std::move(server)),
        state_dir_(std::move(state_dir)),
        examples_(examples),
        eval_examples_(eval_examples) {
    tls_.ca_pem = std::move(ca_pem);
    tls_.cert_pem = std::move(cert_pem);
    tls_.key_pem = std::move(key_pem);
    tls_.token = std::move(token);
    options_.client_id = std::move(client_id);
    options_.device = "python";
    options_.give_up_after_ms = static_cast<int64_t>(give_up_s * 1000);
    options_.poll_wait_ms = static_cast<int64_t>(poll_wait_s * 1000);
    options_.seed = seed;
    if (local_dp_clip > 0) {
      options_.local_dp_clip = local_dp_clip;
      options_.local_dp_noise = local_dp_noise;
      local_dp_announced_ = LocalDpAnnouncement(local_dp_clip, local_dp_noise);
    }
    limits_.max_upload_bytes_per_s = static_cast<int64_t>(max_upload_kib_s * 1024);
    options_.save_updates_dir = std::move(save_updates_dir);
    if (!device_blocked.is_none()) {
      // Called on the runtime's thread: takes the GIL. Copies of the std::function share one
      // reference, dropped with the GIL held, so no Python refcount moves without it.
      std::shared_ptr<py::object> fn(new py::object(std::move(device_blocked)), [](py::object* p) {
        py::gil_scoped_acquire gil;
        delete p;
      });
      options_.device_blocked = [fn]() -> std::string {
        py::gil_scoped_acquire gil;
        try {
          py::object why = (*fn)();
          return why.is_none() ? "" : py::str(why).cast<std::string>();
        } catch (py::error_already_set& e) {  // a policy that cannot say yes keeps the device idle
          return "the device_blocked function raised " + std::string(e.what());
        }
      };
      options_.device_check_ms = static_cast<int64_t>(device_check_s * 1000);
    }
  }

  // Runs until the federation finishes. `layout` (names and shapes, in the order the arrays come
  // and go) is checked against the server's model at join; None skips the check (the NumPy form
  // takes whatever the server sends).
  py::dict Run(std::optional<Layout> layout, py::function train, py::object evaluate) {
    ClientOptions o = options_;
    std::unique_ptr<ClientStateDir> state;
    if (!state_dir_.empty()) {
      Result<std::unique_ptr<ClientStateDir>> opened = ClientStateDir::Open(state_dir_);
      if (!opened.ok()) throw std::runtime_error("state_dir: " + opened.status().ToString());
      state = std::move(opened).value();
      o.state = state.get();
    }
    if (eval_examples_ > 0 && !evaluate.is_none()) o.eval_data = ExamplesHeldInPython(eval_examples_);
    std::unique_ptr<FederationTransport> transport =
        MakeGrpcFederationTransport(server_, tls_, limits_, local_dp_announced_);
    // The factory runs on the runtime's thread, at every join: it takes the GIL to hand the
    // functions to a new PythonTrainer. (Its own copies of them are made and dropped here, with
    // the GIL held.)
    auto times = std::make_shared<BindingTimes>();
    ClientRuntime runtime(
        o, transport.get(),
        [train, evaluate, layout, times](const std::string& announced) -> Result<std::unique_ptr<Trainer>> {
          if (layout) PLEXUS_RETURN_IF_ERROR(CheckLayout(*layout, announced));
          py::gil_scoped_acquire gil;
          return std::unique_ptr<Trainer>(std::make_unique<PythonTrainer>(train, evaluate, times));
        },
        ExamplesHeldInPython(examples_));
    // The runtime runs on its own thread while this (Python's main) thread waits with the GIL
    // released, checking every 20 ms for a signal: Python runs signal handlers only on the main
    // thread, so Ctrl-C stops the runtime (cancelling the call in progress) and raises here.
    std::atomic<bool> stop{false}, done{false};
    std::optional<py::error_already_set> interrupted;
    Result<ClientSummary> summary = InternalError("not run");
    std::thread worker([&] {
      summary = runtime.Run(&stop);
      done = true;
    });
    while (true) {
      {
        py::gil_scoped_release released;
        for (int i = 0; i < 20 && !done.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (done.load()) break;
      if (PyErr_CheckSignals() != 0) {
        interrupted.emplace();  // takes the exception the handler raised
        stop = true;
        transport->Shutdown();
        break;
      }
    }
    {
      py::gil_scoped_release released;
      worker.join();
    }
    if (interrupted) throw std::move(*interrupted);
    if (!summary.ok()) throw std::runtime_error(summary.status().ToString());
    py::dict d;
    d["client_id"] = summary->client_id;
    d["tasks_completed"] = summary->tasks_completed;
    d["tasks_refused"] = summary->tasks_refused;
    d["tasks_failed"] = summary->tasks_failed;
    d["downloads"] = summary->downloads;
    d["evaluations"] = summary->evaluations;
    d["uploads_resumed_after_restart"] = summary->uploads_resumed_after_restart;
    d["binding_native_s"] = times->native_s;
    d["train_call_s"] = times->call_s;
    d["tasks_timed"] = times->tasks;
    d["pauses"] = summary->pauses;
    if (options_.local_dp_clip > 0) {
      d["local_dp_releases"] = runtime.local_dp_releases();
      d["local_dp_epsilon"] = LocalDpEpsilon(options_.local_dp_noise, runtime.local_dp_releases());
    }
    return d;
  }

 private:
  std::string server_;
  ClientTls tls_;
  std::string state_dir_;
  int64_t examples_;
  int64_t eval_examples_;
  ClientOptions options_;
  LinkLimits limits_;
  std::string local_dp_announced_;
};

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "The native half of the plexus package: a Plexus client whose training is a Python function.";
  py::class_<NativeClient>(m, "NativeClient")
      .def(py::init<std::string, std::string, std::string, std::string, std::string, std::string, std::string, double,
                    uint64_t, int64_t, int64_t, double, double, double, double, std::string, py::object, double>(),
           py::arg("server"), py::arg("ca_pem"), py::arg("cert_pem"), py::arg("key_pem"), py::arg("token"),
           py::arg("state_dir"), py::arg("client_id"), py::arg("give_up_s"), py::arg("seed"), py::arg("examples"),
           py::arg("eval_examples"), py::arg("poll_wait_s"), py::arg("local_dp_clip") = 0.0,
           py::arg("local_dp_noise") = 0.0, py::arg("max_upload_kib_s") = 0.0, py::arg("save_updates_dir") = "",
           py::arg("device_blocked") = py::none(), py::arg("device_check_s") = 5.0)
      .def("run", &NativeClient::Run, py::arg("layout"), py::arg("train"), py::arg("evaluate"));
  BindServerDatabase(m);
  m.def(
      "compare_layouts",
      [](const Layout& mine, const std::string& what, const Layout& theirs, const std::string& whose) {
        const Status s = CompareLayouts(mine, what, theirs, whose);
        return s.ok() ? std::string() : s.message();
      },
      py::arg("mine"), py::arg("what"), py::arg("theirs"), py::arg("whose"),
      "Where two layouts ([(name, shape)], in order) first differ, in one line; empty when they agree.");
  m.def(
      "set_log_level", [](const std::string& level) { spdlog::set_level(spdlog::level::from_str(level)); },
      py::arg("level"));
}

}  // namespace plexus::python
