// The Python package's reader of a server's database (plexus.open_db, docs/python.md): the
// versions, each round's record (metrics, the updates merged into it) and any held model version
// as NumPy arrays, through SqliteStore opened shared (no lock: a running server keeps going).
#pragma once

#include <pybind11/pybind11.h>

namespace plexus::python {

// Adds the class ServerDatabase to `m`.
void BindServerDatabase(pybind11::module_& m);

}  // namespace plexus::python
