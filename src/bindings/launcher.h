// A CPython callable that launches a Program (launcher.cc says why it is not pybind11).
#pragma once
#include <memory>

#include "bindings/program.h"

namespace tegula::bindings {

void init_launcher(py::module_& m);
py::object make_launcher(std::shared_ptr<Program> program);

}  // namespace tegula::bindings
