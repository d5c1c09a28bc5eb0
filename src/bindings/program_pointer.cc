// The launch's check of a T.ptr argument (language/pointers.py): what it takes and the
// address it passes.
#include "bindings/bindings.h"
#include "bindings/program.h"

namespace tegula::bindings {

namespace {
std::string type_name(PyObject* o) { return Py_TYPE(o)->tp_name; }
}  // namespace

// T.ptr: a CUDA tensor passes its data_ptr (and sets the call's device like any tensor),
// an int the address itself, None a null pointer (as TileLang's launch does); the tensors
// T.make_tensor makes there need the address aligned to align_bytes.
void Program::check_pointer(const ParamSpec& p, PyObject* obj, ArgValue* out, int* device) const {
  uint64_t addr = 0;
  if (THPVariable_Check(obj)) {
    const at::Tensor& t = THPVariable_Unpack(obj);
    if (!t.is_cuda()) bad(p, "(T.ptr) must be a CUDA tensor or an address (an int), got a tensor on " + t.device().str());
    if (*device < 0) {
      *device = t.get_device();
    } else if (t.get_device() != *device) {
      bad(p, "is on cuda:" + std::to_string(t.get_device()) + " but earlier arguments are on cuda:" + std::to_string(*device));
    }
    addr = reinterpret_cast<uintptr_t>(t.data_ptr());
  } else if (PyLong_Check(obj) && !PyBool_Check(obj)) {
    addr = PyLong_AsUnsignedLongLong(obj);
    if (PyErr_Occurred()) {
      PyErr_Clear();
      bad(p, "(T.ptr) must be an address, an int in [0, 2**64), got " + py::repr(obj).cast<std::string>());
    }
  } else if (obj != Py_None) {
    bad(p, "(T.ptr) must be a CUDA tensor (its data_ptr is passed) or an address (an int such as "
           "tensor.data_ptr()), got " + type_name(obj));
  }
  if (p.align_bytes > 1 && addr % uint64_t(p.align_bytes) != 0) {
    bad(p, "(T.ptr) must be an address aligned to " + std::to_string(p.align_bytes) + " bytes (the kernel reads or "
           "writes the tensor there in " + std::to_string(p.align_bytes) + "-byte pieces); got one " +
           std::to_string(addr % uint64_t(p.align_bytes)) + " bytes past such a boundary");
  }
  out->u64 = addr;
}

}  // namespace tegula::bindings
