// A CPython callable that launches a Program (launcher.cc says why it is not pybind11).
#pragma once
#include <memory>

#include "bindings/program.h"

namespace tegula::bindings {

void init_launcher(py::module_& m);
// traced: what a call whose arguments need_tracing runs instead (None: an ArgumentError).
py::object make_launcher(std::shared_ptr<Program> program, py::object traced = py::none());
// Whether these call arguments are tensors of torch's tracers (fake, functional, meta,
// functorch-wrapped) or a TorchDispatchMode is active: nothing a kernel can launch on.
bool needs_tracing(PyObject* const* args, size_t nargs);
// Whether t is one of those tracers' tensors (needs_tracing's test of one tensor).
bool is_traced_tensor(const at::Tensor& t);

}  // namespace tegula::bindings
