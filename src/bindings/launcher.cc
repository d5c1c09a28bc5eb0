// tegula._C.Launcher: the callable a JITKernel hands out as its __call__.
//
// A plain CPython type rather than a pybind11 method: pybind11's dispatcher copies the
// argument tuple and resolves overloads on every call, which costs a measurable part of a
// microsecond on a path that should be dominated by cuLaunchKernel itself. It takes the
// vectorcall protocol, so a direct call builds no argument tuple either.
//
// A call whose arguments are not memory a kernel can run on (FakeTensor, the functional
// tensors of torch.compile's tracing, meta tensors, BatchedTensor under vmap) or that
// happens under a TorchDispatchMode goes to the launcher's `traced` callable instead: the
// kernel's torch.library operator (tegula/traced.py), which torch's tracers understand.
#include "bindings/launcher.h"

#include <c10/core/impl/TorchDispatchModeTLS.h>

#include <cstddef>

#include "bindings/bindings.h"

namespace tegula::bindings {

namespace {

struct LauncherObject {
  PyObject_HEAD
  std::shared_ptr<Program>* program;
  vectorcallfunc vectorcall;
  PyObject* traced;  // owned; null: such a call is an ArgumentError
};

void launcher_dealloc(PyObject* self) {
  auto* l = reinterpret_cast<LauncherObject*>(self);
  delete l->program;
  Py_XDECREF(l->traced);
  Py_TYPE(self)->tp_free(self);
}

PyObject* launch(PyObject* self, PyObject* const* args, size_t nargs) {
  auto* l = reinterpret_cast<LauncherObject*>(self);
  if (needs_tracing(args, nargs)) {
    if (l->traced) return PyObject_Vectorcall(l->traced, args, nargs, nullptr);
    PyErr_SetString(argument_error_type().ptr(),
                    ((*l->program)->name() + ": an argument is a traced or fake tensor (or a TorchDispatchMode is "
                     "active), which has no memory to launch on")
                        .c_str());
    return nullptr;
  }
  try {
    py::object out = (*l->program)->call(args, nargs);
    return out.release().ptr();
  } catch (...) {
    set_python_error(std::current_exception());
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

// The call slot install_fast_call gives a class: `obj(*args)` is `obj.<attr>(*args)`
// (JITKernel: its launcher `_call`), with no Python frame between. The class keeps a
// Python __call__ meaning the same, which is what torch.compile's Dynamo reads and
// traces; CPython calls this slot. A subclass gets CPython's own slot back.
std::vector<std::pair<PyTypeObject*, PyObject*>>& fast_call_attrs() {
  static std::vector<std::pair<PyTypeObject*, PyObject*>> attrs;
  return attrs;
}

PyObject* call_through_attribute(PyObject* self, PyObject* args, PyObject* kwargs) {
  PyObject* name = nullptr;
  for (auto& [type, attr] : fast_call_attrs()) {
    if (type == Py_TYPE(self)) name = attr;
  }
  if (!name) {
    PyErr_SetString(PyExc_TypeError, "install_fast_call: no attribute recorded for this class");
    return nullptr;
  }
  PyObject* call = PyObject_GetAttr(self, name);
  if (!call) return nullptr;
  PyObject* out = PyObject_Call(call, args, kwargs);
  Py_DECREF(call);
  return out;
}

}  // namespace

bool is_traced_tensor(const at::Tensor& t) {
  // What torch's tracers put in place of memory: a tensor subclass dispatching through
  // Python (FakeTensor, FunctionalTensor, DTensor), a functionalization or functorch
  // wrapper, a meta tensor. (Functionality keys only: a per-backend key such as Meta
  // would match every dense tensor.)
  static const c10::DispatchKeySet traced_keys{c10::DispatchKey::Python, c10::DispatchKey::Functionalize,
                                               c10::DispatchKey::FuncTorchBatched,
                                               c10::DispatchKey::FuncTorchGradWrapper};
  return t.key_set().has_any(traced_keys) || t.is_meta();
}

bool needs_tracing(PyObject* const* args, size_t nargs) {
  // A traced tensor among the arguments, or a TorchDispatchMode (FakeTensorMode, make_fx's
  // proxy mode).
  if (c10::impl::dispatch_mode_enabled()) return true;
  for (size_t i = 0; i < nargs; ++i) {
    if (THPVariable_Check(args[i]) && is_traced_tensor(THPVariable_Unpack(args[i]))) return true;
  }
  return false;
}

void init_launcher(py::module_& m) {
  if (PyType_Ready(&launcher_type) < 0) throw py::error_already_set();
  Py_INCREF(&launcher_type);
  m.add_object("Launcher", py::handle(reinterpret_cast<PyObject*>(&launcher_type)));
  m.def("needs_tracing", [](const py::args& args) {
    std::vector<PyObject*> items;
    for (auto& a : args) items.push_back(a.ptr());
    return needs_tracing(items.data(), items.size());
  }, "Whether a kernel called with these arguments must go through its torch operator: a fake, functional, meta "
     "or functorch-wrapped tensor among them, or a TorchDispatchMode active.");
  m.def("install_fast_call", [](const py::type& cls, const std::string& attr) {
    auto* t = reinterpret_cast<PyTypeObject*>(cls.ptr());
    if (!(t->tp_flags & Py_TPFLAGS_HEAPTYPE) || !py::hasattr(cls, "__call__")) {
      throw py::type_error("install_fast_call: a Python class with a __call__ is expected");
    }
    for (auto& entry : fast_call_attrs()) {
      if (entry.first == t) return;
    }
    Py_INCREF(cls.ptr());  // the class outlives the slot it holds
    fast_call_attrs().emplace_back(t, PyUnicode_InternFromString(attr.c_str()));
    t->tp_call = call_through_attribute;
  }, py::arg("cls"), py::arg("attr"),
     "Makes cls(...)'s instances callable as instance.<attr>(*args, **kwargs) without running cls.__call__, "
     "which must mean the same (torch.compile traces it).");
}

py::object make_launcher(std::shared_ptr<Program> program, py::object traced) {
  auto* obj = PyObject_New(LauncherObject, &launcher_type);
  if (!obj) throw py::error_already_set();
  obj->program = new std::shared_ptr<Program>(std::move(program));
  obj->vectorcall = launcher_vectorcall;
  obj->traced = traced.is_none() ? nullptr : traced.release().ptr();
  return py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(obj));
}

}  // namespace tegula::bindings
