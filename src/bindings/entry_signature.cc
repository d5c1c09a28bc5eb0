// The signature of an entry point's call (entry_signature.h): per tensor its dtype,
// device, sizes, strides, requires_grad, alignment and aliasing; every other argument's
// value; keywords by name.
#include "bindings/entry_signature.h"

#include <c10/core/GradMode.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

#include "bindings/launcher.h"

namespace tegula::bindings::signature {

namespace {

enum Tag : int64_t { kTensor = 1, kNone, kBool, kInt, kFloat, kStr, kTuple, kList, kDtype, kKeyword };

// The address's alignment as a power of two, up to 256 bytes (what any launch may test).
int64_t alignment_class(const void* p) {
  auto v = reinterpret_cast<uintptr_t>(p);
  if (v == 0) return 8;
  int64_t a = 0;
  while (a < 8 && !(v & 1)) v >>= 1, ++a;
  return a;
}

// Adds v to the key; false for a value no plan covers.
bool add_value(Key& key, Inputs& in, PyObject* v, int depth) {
  auto& w = key.words;
  if (v == Py_None) {
    w.push_back(kNone);
    return true;
  }
  if (PyBool_Check(v)) {
    w.push_back(kBool);
    w.push_back(v == Py_True);
    return true;
  }
  if (THPVariable_CheckExact(v)) {
    const at::Tensor& t = THPVariable_Unpack(v);
    if (!t.defined() || is_traced_tensor(t) || t.layout() != at::kStrided ||
        t.is_conj() || t.is_neg()) {
      return false;
    }
    if (t.requires_grad() && c10::GradMode::is_enabled()) return false;
    w.push_back(kTensor);
    w.push_back(int64_t(t.scalar_type()));
    w.push_back(int64_t(t.device().type()));
    w.push_back(int64_t(t.device().index()));
    w.push_back(t.dim());
    for (int64_t s : t.sizes()) w.push_back(s);
    for (int64_t s : t.strides()) w.push_back(s);
    w.push_back(t.requires_grad());
    w.push_back(alignment_class(t.data_ptr()));
    int64_t alias = -1;
    const c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
    for (size_t i = 0; i < in.tensors.size() && alias < 0; ++i) {
      if (in.tensors[i]->storage().unsafeGetStorageImpl() == storage) alias = int64_t(i);
    }
    w.push_back(alias);
    in.objects.push_back(v);
    in.tensors.push_back(&t);
    return true;
  }
  if (PyLong_Check(v)) {
    int overflow = 0;
    long long value = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (value == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      return false;
    }
    w.push_back(kInt);
    w.push_back(value);
    return true;
  }
  if (PyFloat_Check(v)) {
    double d = PyFloat_AS_DOUBLE(v);
    int64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    w.push_back(kFloat);
    w.push_back(bits);
    return true;
  }
  if (PyUnicode_Check(v)) {
    Py_ssize_t n = 0;
    const char* s = PyUnicode_AsUTF8AndSize(v, &n);
    if (!s) {
      PyErr_Clear();
      return false;
    }
    w.push_back(kStr);
    key.strings.emplace_back(s, size_t(n));
    return true;
  }
  if (THPDtype_Check(v)) {
    w.push_back(kDtype);
    w.push_back(int64_t(reinterpret_cast<THPDtype*>(v)->scalar_type));
    return true;
  }
  bool tuple = PyTuple_Check(v);
  if ((tuple || PyList_Check(v)) && depth < 2) {
    Py_ssize_t n = tuple ? PyTuple_GET_SIZE(v) : PyList_GET_SIZE(v);
    w.push_back(tuple ? kTuple : kList);
    w.push_back(n);
    for (Py_ssize_t i = 0; i < n; ++i) {
      if (!add_value(key, in, tuple ? PyTuple_GET_ITEM(v, i) : PyList_GET_ITEM(v, i), depth + 1)) return false;
    }
    return true;
  }
  return false;
}

}  // namespace

bool make_key(PyObject* args, PyObject* kwargs, Key& key, Inputs& in) {
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args); ++i) {
    if (!add_value(key, in, PyTuple_GET_ITEM(args, i), 0)) return false;
  }
  if (kwargs) {
    PyObject *name, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(kwargs, &pos, &name, &value)) {
      const char* s = PyUnicode_AsUTF8(name);
      if (!s) {
        PyErr_Clear();
        return false;
      }
      key.words.push_back(kKeyword);
      key.strings.emplace_back(s);
      if (!add_value(key, in, value, 0)) return false;
    }
  }
  return true;
}

}  // namespace tegula::bindings::signature
