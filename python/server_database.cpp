#include "python/server_database.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "server/store/sqlite_store.h"

namespace plexus::python {
namespace py = pybind11;
namespace {

template <typename T>
T Take(Result<T> r, const std::string& what) {
  if (!r.ok()) throw std::runtime_error(what + ": " + r.status().ToString());
  return std::move(r).value();
}

py::object Optional(const std::optional<double>& v) { return v ? py::object(py::float_(*v)) : py::object(py::none()); }

class ServerDatabase {
 public:
  explicit ServerDatabase(const std::string& path) : path_(path) {
    if (!std::filesystem::exists(path)) throw std::runtime_error("database '" + path + "' does not exist");
    store_ = Take(SqliteStore::Open(path, SqliteStore::Access::kShared), "database '" + path + "'");
  }

  std::vector<uint64_t> Versions() { return Take(store_->CheckpointVersions(), "versions"); }

  py::list Rounds() {
    py::list out;
    for (const RoundRecord& r : Take(store_->ListRounds(), "rounds")) {
      py::dict d;
      d["round"] = r.round;
      d["model_version"] = r.model_version;
      d["model_sha256"] = r.model_sha256;
      d["selected"] = r.num_selected;
      d["updates"] = r.num_updates;
      d["dropped"] = r.num_dropped;
      d["refused"] = r.num_refused;
      d["examples"] = r.num_examples;
      d["attempts"] = r.attempts;
      d["train_loss"] = r.mean_train_loss;
      d["test_accuracy"] = Optional(r.test_accuracy);
      d["test_loss"] = Optional(r.test_loss);
      d["federated_test_accuracy"] = Optional(r.federated_accuracy);
      d["federated_test_loss"] = Optional(r.federated_loss);
      d["federated_examples"] = r.federated_examples;
      d["federated_clients"] = r.federated_clients;
      py::list merged;
      for (const MergedUpdate& m : r.merged) {
        py::dict u;
        u["client_id"] = m.client_id;
        u["task_id"] = m.task_id;
        u["staleness"] = m.staleness;
        u["group"] = m.group;
        u["ms_per_step"] = Optional(m.ms_per_step);
        merged.append(std::move(u));
      }
      d["merged"] = std::move(merged);
      out.append(std::move(d));
    }
    return out;
  }

  // (version, [(name, array), ...]) of `version`, or of the latest checkpoint when None; the
  // arrays own their memory.
  py::tuple Model(std::optional<uint64_t> version) {
    ModelState model;
    if (version) {
      model = Take(store_->Checkpoint(*version), "version " + std::to_string(*version));
    } else {
      std::optional<ModelState> latest = Take(store_->LatestCheckpoint(), "the latest version");
      if (!latest) throw std::runtime_error("database '" + path_ + "' holds no model yet");
      model = std::move(*latest);
    }
    py::list tensors;
    for (size_t i = 0; i < model.tensors().size(); ++i) {
      const TensorSlot& t = model.tensors()[i];
      py::array_t<float> a(std::vector<py::ssize_t>(t.shape.begin(), t.shape.end()));
      std::span<const float> values = model.tensor(i);
      std::copy(values.begin(), values.end(), a.mutable_data());
      tensors.append(py::make_tuple(t.name, std::move(a)));
    }
    return py::make_tuple(model.version(), std::move(tensors));
  }

  std::string Meta(const std::string& key) {
    Result<std::string> v = store_->GetMeta(key);
    return v.ok() ? *v : std::string();
  }

 private:
  std::string path_;
  std::unique_ptr<SqliteStore> store_;
};

}  // namespace

void BindServerDatabase(py::module_& m) {
  py::class_<ServerDatabase>(m, "ServerDatabase")
      .def(py::init<std::string>(), py::arg("path"))
      .def("versions", &ServerDatabase::Versions)
      .def("rounds", &ServerDatabase::Rounds)
      .def("model", &ServerDatabase::Model, py::arg("version") = py::none())
      .def("meta", &ServerDatabase::Meta, py::arg("key"));
}

}  // namespace plexus::python
