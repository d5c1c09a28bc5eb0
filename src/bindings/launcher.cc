// tegula._C.Launcher: the callable a JITKernel hands out as its __call__.
//
// A plain CPython type rather than a pybind11 method: pybind11's dispatcher copies the
// argument tuple and resolves overloads on every call, which costs a measurable part of a
// microsecond on a path that should be dominated by cuLaunchKernel itself. It takes the
// vectorcall protocol, so a direct call builds no argument tuple either.
#include "bindings/launcher.h"

#include <cstddef>

#include "bindings/bindings.h"

namespace tegula::bindings {

namespace {

struct LauncherObject {
  PyObject_HEAD
  std::shared_ptr<Program>* program;
  vectorcallfunc vectorcall;
};

void launcher_dealloc(PyObject* self) {
  delete reinterpret_cast<LauncherObject*>(self)->program;
  Py_TYPE(self)->tp_free(self);
}

PyObject* launch(PyObject* self, PyObject* const* args, size_t nargs) {
  try {
    py::object out = (*reinterpret_cast<LauncherObject*>(self)->program)->call(args, nargs);
    return out.release().ptr();
  } catch (py::error_already_set& e) {
    e.restore();
    return nullptr;
  } catch (...) {
    // Route C++ exceptions through the module's translators (ArgumentError, CudaError...).
    try {
      throw;
    } catch (const ArgumentError& e) {
      PyErr_SetString(argument_error_type().ptr(), e.what());
    } catch (const CudaError& e) {
      PyErr_SetString(cuda_error_type().ptr(), e.what());
    } catch (const std::exception& e) {
      PyErr_SetString(internal_error_type().ptr(), e.what());
    }
    return nullptr;
  }
}

PyObject* positional_only() {
  PyErr_SetString(PyExc_TypeError, "a tegula kernel takes its arguments by position only");
  return nullptr;
}

PyObject* launcher_vectorcall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  if (kwnames && PyTuple_GET_SIZE(kwnames) != 0) return positional_only();
  return launch(self, args, PyVectorcall_NARGS(nargsf));
}

PyObject* launcher_call(PyObject* self, PyObject* args, PyObject* kwargs) {
  if (kwargs && PyDict_Size(kwargs) != 0) return positional_only();
  return launch(self, reinterpret_cast<PyTupleObject*>(args)->ob_item, size_t(PyTuple_GET_SIZE(args)));
}

PyTypeObject launcher_type = [] {
  PyTypeObject t{PyVarObject_HEAD_INIT(nullptr, 0)};
  t.tp_name = "tegula._C.Launcher";
  t.tp_basicsize = sizeof(LauncherObject);
  t.tp_dealloc = launcher_dealloc;
  t.tp_call = launcher_call;
  t.tp_vectorcall_offset = offsetof(LauncherObject, vectorcall);
  t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
  t.tp_doc = "Launches a compiled kernel: checks the arguments, allocates outputs, launches.";
  return t;
}();

}  // namespace

void init_launcher(py::module_& m) {
  if (PyType_Ready(&launcher_type) < 0) throw py::error_already_set();
  Py_INCREF(&launcher_type);
  m.add_object("Launcher", py::handle(reinterpret_cast<PyObject*>(&launcher_type)));
}

py::object make_launcher(std::shared_ptr<Program> program) {
  auto* obj = PyObject_New(LauncherObject, &launcher_type);
  if (!obj) throw py::error_already_set();
  obj->program = new std::shared_ptr<Program>(std::move(program));
  obj->vectorcall = launcher_vectorcall;
  return py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(obj));
}

}  // namespace tegula::bindings
