// The extension module `tegula._C`: its exception classes and its submodule `ir`.
//
// C++ exceptions become Python ones wherever they are thrown, through one translator:
//   tegula::UserError       -> CompileError   (Exception; .file .line .col .msg, str = msg)
//   bindings::ArgumentError -> ArgumentError  (ValueError)
//   bindings::AssumptionError -> AssumptionError (RuntimeError)
//   tegula::CudaError       -> CudaError      (RuntimeError)
//   tegula::InternalError   -> InternalError  (RuntimeError)
#include <pybind11/pybind11.h>

#include "bindings/bindings.h"

namespace tegula::bindings {
namespace {

// Created once when the module loads and never freed: the interpreter may still raise
// them while it tears down other modules.
PyObject* g_compile_error = nullptr;
PyObject* g_cuda_error = nullptr;
PyObject* g_internal_error = nullptr;
PyObject* g_argument_error = nullptr;
PyObject* g_assumption_error = nullptr;

PyObject* add_exception(py::module_& m, const char* name, PyObject* base, const char* doc) {
  std::string qualified = py::str(m.attr("__name__")).cast<std::string>() + "." + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base, nullptr);
  if (!type) throw py::error_already_set();
  m.add_object(name, py::handle(type));
  return type;
}

void raise_compile_error(const UserError& e) {
  py::object exc = py::reinterpret_borrow<py::object>(g_compile_error)(e.what());
  exc.attr("file") = e.loc().file;
  exc.attr("line") = e.loc().line;
  exc.attr("col") = e.loc().col;
  exc.attr("msg") = std::string(e.what());
  PyErr_SetObject(g_compile_error, exc.ptr());
}

void translate(std::exception_ptr p) {
  // Exceptions not listed here propagate to pybind11's own translators.
  try {
    if (p) std::rethrow_exception(p);
  } catch (const UserError& e) {
    raise_compile_error(e);
  } catch (const ArgumentError& e) {
    PyErr_SetString(g_argument_error, e.what());
  } catch (const AssumptionError& e) {
    PyErr_SetString(g_assumption_error, e.what());
  } catch (const CudaError& e) {
    PyErr_SetString(g_cuda_error, e.what());
  } catch (const InternalError& e) {
    PyErr_SetString(g_internal_error, e.what());
  }
}

void register_exceptions(py::module_& m) {
  g_compile_error = add_exception(m, "CompileError", PyExc_Exception,
                                  "A mistake in the kernel's DSL source; .file, .line, .col say where.");
  g_cuda_error = add_exception(m, "CudaError", PyExc_RuntimeError,
                               "A CUDA driver or NVRTC call failed; the message has the call, its error and the log.");
  g_internal_error = add_exception(m, "InternalError", PyExc_RuntimeError, "A bug in Tegula itself.");
  g_argument_error = add_exception(m, "ArgumentError", PyExc_ValueError, "A bad argument to a kernel launch.");
  g_assumption_error = add_exception(m, "AssumptionError", PyExc_RuntimeError,
                                     "A call that breaks a T.assume the launch checks.");
  py::register_exception_translator(&translate);
}

}  // namespace

py::handle compile_error_type() { return g_compile_error; }
py::handle cuda_error_type() { return g_cuda_error; }
py::handle internal_error_type() { return g_internal_error; }
py::handle argument_error_type() { return g_argument_error; }
py::handle assumption_error_type() { return g_assumption_error; }

void set_python_error(std::exception_ptr p) {
  try {
    std::rethrow_exception(p);
  } catch (py::error_already_set& e) {
    e.restore();
    return;
  } catch (...) {
  }
  translate(p);
  if (PyErr_Occurred()) return;
  try {
    std::rethrow_exception(p);
  } catch (const std::exception& e) {
    PyErr_SetString(g_internal_error, e.what());
  } catch (...) {
    PyErr_SetString(g_internal_error, "an unknown C++ exception");
  }
}

}  // namespace tegula::bindings

PYBIND11_MODULE(_C, m) {
  namespace tb = tegula::bindings;
  m.doc() = "Tegula's C++ core: the tile IR builder (submodule ir), the compiler and the launcher.";
  tb::register_exceptions(m);
  pybind11::module_ ir = m.def_submodule("ir", "Builds tile IR nodes; every node carries the location of set_loc.");
  // Makes `import tegula._C.ir` work, not only `from tegula._C import ir`.
  pybind11::module_::import("sys").attr("modules")[ir.attr("__name__")] = ir;
  tb::init_ir_builder(ir);
  tb::init_compile(m);
}
