// tegula._C.Launcher: the callable a JITKernel hands out as its __call__.
//
// A plain CPython type rather than a pybind11 method: pybind11's dispatcher copies the
// argument tuple and resolves overloads on every call, which costs a measurable part of a
// microsecond on a path that should be dominated by cuLaunchKernel itself.
#include "bindings/launcher.h"

#include "bindings/bindings.h"

namespace tegula::bindings {

namespace {

struct LauncherObject {
  PyObject_HEAD
  std::shared_ptr<Program>* program;
};

void launcher_dealloc(PyObject* self) {
  delete reinterpret_cast<LauncherObject*>(self)->program;
  Py_TYPE(self)->tp_free(self);
}

PyObject* launcher_call(PyObject* self, PyObject* args, PyObject* kwargs) {
  if (kwargs && PyDict_Size(kwargs) != 0) {
    PyErr_SetString(PyExc_TypeError, "a tegula kernel takes its arguments by position only");
    return nullptr;
  }
  try {
    py::args a = py::reinterpret_borrow<py::args>(args);
    py::object out = (*reinterpret_cast<LauncherObject*>(self)->program)->call(a);
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

PyTypeObject launcher_type = [] {
  PyTypeObject t{PyVarObject_HEAD_INIT(nullptr, 0)};
  t.tp_name = "tegula._C.Launcher";
  t.tp_basicsize = sizeof(LauncherObject);
  t.tp_dealloc = launcher_dealloc;
  t.tp_call = launcher_call;
  t.tp_flags = Py_TPFLAGS_DEFAULT;
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
  return py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(obj));
}

}  // namespace tegula::bindings
