#include "bindings/program.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <cmath>
#include <optional>
#include <cstring>

#include "bindings/bindings.h"
#include "bindings/launcher.h"
#include "codegen/cuda_printer.h"
#include "ir/analyzer.h"
#include "ir/printer.h"

namespace tegula::bindings {

namespace {

std::string shape_str(const ParamSpec& p) {
  Text os;
  os << "(";
  for (size_t d = 0; d < p.dims.size(); ++d) os << (d ? ", " : "") << (p.dims[d] < 0 ? "?" : std::to_string(p.dims[d]));
  os << ")";
  return os.str();
}

std::string type_name(PyObject* o) { return Py_TYPE(o)->tp_name; }

// [lo, hi] of an integer parameter type, as int128-free pairs: uint64's top is kept apart.
struct IntRange {
  int64_t lo;
  uint64_t hi;
};
IntRange int_range(ir::DataType t) {
  if (t.is_bool()) return {0, 1};
  if (t.code == ir::DataType::UInt) return {0, t.bits >= 64 ? ~uint64_t(0) : (uint64_t(1) << t.bits) - 1};
  if (t.bits >= 64) return {INT64_MIN, uint64_t(INT64_MAX)};
  return {-(int64_t(1) << (t.bits - 1)), (uint64_t(1) << (t.bits - 1)) - 1};
}

// The torch dtypes a 4-bit parameter accepts: bytes holding two elements.
bool packed_storage(ir::DataType t, at::ScalarType s) {
  return s == at::kByte || s == at::kChar || (t.code == ir::DataType::Float4E2M1 && s == at::kFloat4_e2m1fn_x2);
}

}  // namespace

Program::Program(std::string kernel_name, std::vector<ParamSpec> params, int num_dynamic,
                 std::vector<ir::Expr> dynamic_vars, std::vector<Launch> launches)
    : kernel_name_(std::move(kernel_name)), params_(std::move(params)), num_dynamic_(num_dynamic),
      dynamic_vars_(std::move(dynamic_vars)) {
  for (auto& p : params_) {
    num_outputs_ += p.is_output;
    num_workspaces_ += p.is_workspace;
  }
  dyn_multiple_.assign(num_dynamic_, 1);
  internal_assert(!launches.empty()) << "a program has at least one kernel";
  for (auto& l : launches) {
    Kernel k;
    internal_assert(l.grid.size() >= 1 && l.grid.size() <= 3) << "a grid has 1 to 3 extents";
    bool all_const = true;
    for (auto& g : l.grid) {
      const int64_t* v = ir::as_const_int(g);
      if (v) k.const_grid.push_back(*v);
      else all_const = false;
    }
    if (!all_const) k.const_grid.clear();
    l.rules.dyn_multiple.resize(num_dynamic_, 1);
    for (int v = 0; v < num_dynamic_; ++v) dyn_multiple_[v] = std::max(dyn_multiple_[v], l.rules.dyn_multiple[v]);
    k.launch = std::move(l);
    kernels_.push_back(std::move(k));
  }
  internal_assert(params_.size() + num_dynamic_ <= size_t(kMaxArgs)) << "too many kernel parameters";
}

void Program::bad(const ParamSpec& p, const std::string& what) const {
  throw ArgumentError(kernel_name_ + ": argument '" + p.name + "' " + what);
}

// A tensor from an argument that is not a torch.Tensor but exposes __dlpack__ or
// __cuda_array_interface__ (CuPy, JAX, numba...): tegula.interop.as_torch converts it
// without a copy. Only reached off the hot path, for a non-Tensor argument.
static at::Tensor foreign_tensor(const std::string& name, PyObject* obj) {
  static PyObject* as_torch = [] {
    py::object fn = py::module_::import("tegula.interop").attr("as_torch");
    return fn.release().ptr();  // kept for the life of the process
  }();
  py::object t = py::reinterpret_steal<py::object>(PyObject_CallFunction(as_torch, "Os", obj, name.c_str()));
  if (!t) throw py::error_already_set();
  internal_assert(THPVariable_Check(t.ptr())) << "tegula.interop.as_torch returned a non-tensor";
  return THPVariable_Unpack(t.ptr());
}

at::Tensor Program::check_tensor(const ParamSpec& p, PyObject* obj, int64_t* dyn, int* device) const {
  at::Tensor t;
  bool foreign = false;
  if (THPVariable_Check(obj)) {
    t = THPVariable_Unpack(obj);
  } else if (PyObject_HasAttrString(obj, "__dlpack__") || PyObject_HasAttrString(obj, "__cuda_array_interface__")) {
    t = foreign_tensor(p.name, obj);
    foreign = true;
  } else {
    bad(p, "must be a torch.Tensor (or an array exposing __dlpack__ or __cuda_array_interface__), got " +
               type_name(obj));
  }
  const bool packed = p.dtype.is_packed();
  if (packed ? !packed_storage(p.dtype, t.scalar_type()) : t.scalar_type() != p.scalar_type) {
    bad(p, "must have dtype " + p.dtype.name() + (packed ? " (a torch.int8 or torch.uint8 tensor of two elements a byte, "
                                                           "the last dimension halved)" : "") +
               ", got " + std::string(c10::toString(t.scalar_type())));
  }
  if (!t.is_cuda()) {
    bad(p, "must be on a CUDA device, got " +
               (foreign ? "a " + type_name(obj) + " on " + t.device().str() +
                              " (read as a torch.Tensor through __dlpack__ or __cuda_array_interface__)"
                        : "a tensor on " + t.device().str()));
  }
  if (t.dim() != int64_t(p.dims.size())) {
    bad(p, "must have shape " + shape_str(p) + " (" + std::to_string(p.dims.size()) + " dimensions), got " +
               std::to_string(t.dim()) + " dimensions");
  }
  for (size_t d = 0; d < p.dims.size(); ++d) {
    // A 4-bit type's last dimension holds two elements a byte.
    int64_t got = t.size(d) * (packed && d + 1 == p.dims.size() ? 2 : 1);
    if (p.dim_var[d] >= 0 && d < p.dim_expr.size() && p.dim_expr[d]) {
      // a * n + b (compile.cc affine_dynamic): n = (dim - b) / a.
      const ir::Expr& var = dynamic_vars_[p.dim_var[d]];
      int64_t b = 0, ab = 0;
      internal_assert(ir::eval_int(p.dim_expr[d], {{var.get(), 0}}, &b) && ir::eval_int(p.dim_expr[d], {{var.get(), 1}}, &ab))
          << "dimension " << d << " of '" << p.name << "' is not affine in a dynamic size";
      int64_t a = ab - b;
      std::string form = ir::to_string(p.dim_expr[d]);
      if (got < b || (got - b) % a != 0) {
        bad(p, "dimension " + std::to_string(d) + " is " + std::to_string(got) + ", which is not " + form +
                   " for any integer " + var.as<ir::VarNode>()->name);
      }
      int64_t n = (got - b) / a;
      int64_t& v = dyn[p.dim_var[d]];
      if (v < 0) {
        v = n;
      } else if (v != n) {
        bad(p, "dimension " + std::to_string(d) + " is " + std::to_string(got) + " = " + form + " for " +
                   var.as<ir::VarNode>()->name + " = " + std::to_string(n) + ", but an earlier argument gave " +
                   std::to_string(v));
      }
    } else if (p.dim_var[d] >= 0) {
      int64_t& v = dyn[p.dim_var[d]];
      if (v < 0) {
        // An int32 dynamic size reaches the kernel as int32, and its index arithmetic is
        // 32-bit; an int64 one (T.dynamic(name, "int64")) as int64, with 64-bit indexing.
        const ir::Expr& var = dynamic_vars_[p.dim_var[d]];
        if (var.dtype().bits == 64 ? got >= ir::dynamic_size_limit(var) : got >= codegen::kIndex32Limit) {
          std::string name = var.as<ir::VarNode>()->name;
          bad(p, "dimension " + std::to_string(d) + " is " + std::to_string(got) +
                     ", too large for the dynamic size '" + name + "': " +
                     (var.dtype().bits == 64
                          ? "an int64 dynamic size is at most " + std::to_string(ir::dynamic_size_limit(var) - 1)
                          : "the kernel indexes int32 dynamic dimensions with 32-bit arithmetic, which allows at most " +
                                std::to_string(codegen::kIndex32Limit - 1) + ". Declare it T.dynamic(\"" + name +
                                "\", \"int64\") (the kernel is then compiled with 64-bit indexing), make it a "
                                "compile-time constant, or split the tensor"));
        }
        int mult = dyn_multiple_[p.dim_var[d]];
        if (mult > 1 && got % mult != 0) {
          bad(p, "dimension " + std::to_string(d) + " is " + std::to_string(got) + ", not a multiple of " +
                     std::to_string(mult) + ": the kernel was compiled with tl.dynamic_alignment=" +
                     std::to_string(mult) + " and its vector accesses rely on it");
        }
        v = got;
      } else if (v != got) {
        bad(p, "dimension " + std::to_string(d) + " is " + std::to_string(got) + " but the same dynamic size was " +
                   std::to_string(v) + " in an earlier argument");
      }
    } else if (p.scalar_sized && d < p.dim_expr.size() && p.dim_expr[d]) {
      // computed from the scalar arguments: check_scalar_sized, once they are all read
    } else if (got != p.dims[d]) {
      bad(p, "must have shape " + shape_str(p) + ", got dimension " + std::to_string(d) + " = " + std::to_string(got));
    }
  }
  if (!p.strides.empty()) {
    check_strides(p, t, dyn);
  } else if (!t.is_contiguous()) {
    bad(p, "must be contiguous (row-major); call .contiguous() first");
  }
  uintptr_t addr = reinterpret_cast<uintptr_t>(t.data_ptr());
  if (p.align_bytes > 1 && addr % p.align_bytes != 0) {
    bad(p, "must start at an address aligned to " + std::to_string(p.align_bytes) +
               " bytes (the kernel reads or writes it in " + std::to_string(p.align_bytes) +
               "-byte pieces); got a view " + std::to_string(addr % p.align_bytes) + " bytes past such a boundary "
               "(storage offset " + std::to_string(t.storage_offset()) + " elements). Pass .clone() of the view");
  }
  if (*device < 0) {
    *device = t.get_device();
  } else if (t.get_device() != *device) {
    bad(p, "is on cuda:" + std::to_string(t.get_device()) + " but earlier arguments are on cuda:" + std::to_string(*device));
  }
  return t;
}

// T.StridedTensor: each stride as declared, or bound to its dynamic var. Strides are in
// elements; a 4-bit type's are in its elements too, so a byte stride counts twice, and its
// last dimension must be the packed one (byte stride 1). A dimension of size 1 is never
// stepped, so its stride is not checked.
void Program::check_strides(const ParamSpec& p, const at::Tensor& t, int64_t* dyn) const {
  const bool packed = p.dtype.is_packed();
  const size_t last = p.strides.size() - 1;
  auto expected = [&] {
    std::string s = "(";
    for (size_t d = 0; d < p.strides.size(); ++d) {
      s += (d ? ", " : "") + (p.strides[d] >= 0 ? std::to_string(p.strides[d])
                                                : dynamic_vars_[p.stride_var[d]].as<ir::VarNode>()->name);
    }
    return s + ")";
  };
  if (packed && t.stride(last) != 1 && t.size(last) > 1) {
    bad(p, "must have byte stride 1 in its last dimension (" + p.dtype.name() + " is packed two elements a byte), got " +
               std::to_string(t.stride(last)));
  }
  for (size_t d = 0; d < p.strides.size(); ++d) {
    int64_t got = t.stride(d) * (packed && d != last ? 2 : 1);
    if (p.stride_var[d] >= 0) {
      int64_t& v = dyn[p.stride_var[d]];
      const ir::Expr& var = dynamic_vars_[p.stride_var[d]];
      if (got >= (var.dtype().bits == 64 ? ir::dynamic_size_limit(var) : codegen::kIndex32Limit)) {
        bad(p, "stride " + std::to_string(d) + " is " + std::to_string(got) + ", too large for a dynamic stride "
                   "(the kernel indexes with 32-bit arithmetic there; declare it int64: T.dynamic(name, \"int64\"))");
      }
      if (v < 0) {
        v = got;
      } else if (v != got) {
        bad(p, "must have strides " + expected() + ": stride " + std::to_string(d) + " is " + std::to_string(got) +
                   " but the same dynamic value " + dynamic_vars_[p.stride_var[d]].as<ir::VarNode>()->name + " was " +
                   std::to_string(v) + " earlier");
      }
    } else if (got != p.strides[d] && t.size(d) > 1) {
      std::string have = "(";
      for (size_t e = 0; e < p.strides.size(); ++e) {
        have += (e ? ", " : "") + std::to_string(t.stride(e) * (packed && e != last ? 2 : 1));
      }
      bad(p, "must have strides " + expected() + " (in elements), got " + have + ")");
    }
  }
}

// The CPython number protocol directly: no pybind11 cast (whose failure text names no
// argument), and nothing allocated for the common int and float.
void Program::check_scalar(const ParamSpec& p, py::handle obj, ArgValue* out) const {
  PyObject* o = obj.ptr();
  if (p.dtype.is_float()) {
    double v;
    if (PyFloat_CheckExact(o)) {
      v = PyFloat_AS_DOUBLE(o);
    } else {
      PyNumberMethods* nm = Py_TYPE(o)->tp_as_number;
      if (!nm || (!nm->nb_float && !nm->nb_index)) {
        bad(p, "(" + p.dtype.name() + ") must be a real number, got " + type_name(o));
      }
      v = PyFloat_AsDouble(o);
      if (v == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        bad(p, "(" + p.dtype.name() + ") must be a real number that fits a float64, got " + type_name(o) + " " +
                   py::repr(obj).cast<std::string>());
      }
    }
    if (p.dtype.bits == 64) {
      out->f64 = v;
      return;
    }
    double top = p.dtype.bits == 32 ? 3.4028234663852886e38 : p.dtype.code == ir::DataType::BFloat ? 3.3895313892515355e38 : 65504.0;
    if (std::isfinite(v) && std::fabs(v) > top) {
      // Rounding would make it infinite; beyond the last finite value by less than half a
      // step it would still round down, but such values are not worth the subtlety.
      Text limit;
      limit << top;
      bad(p, "(" + p.dtype.name() + ") must be within +-" + limit.str() + ", got " + py::repr(obj).cast<std::string>());
    }
    out->u64 = 0;
    if (p.dtype.bits == 32) out->f32 = float(v);
    else if (p.dtype.code == ir::DataType::BFloat) out->u16 = c10::BFloat16(float(v)).x;
    else out->u16 = c10::Half(float(v)).x;
    return;
  }
  IntRange r = int_range(p.dtype);
  auto range_text = [&] { return "[" + std::to_string(r.lo) + ", " + std::to_string(r.hi) + "]"; };
  PyObject* num = nullptr;
  if (!PyLong_Check(o)) {
    // numpy integers and one-element integer tensors give their value through __index__;
    // a float does not (it would be truncated silently).
    num = PyIndex_Check(o) ? PyNumber_Index(o) : nullptr;
    if (!num) {
      PyErr_Clear();
      bad(p, "(" + p.dtype.name() + ") must be an int, got " + type_name(o));
    }
    o = num;
  }
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
  bool in_range;
  if (overflow > 0 && r.hi > uint64_t(INT64_MAX)) {
    unsigned long long u = PyLong_AsUnsignedLongLong(o);  // uint64 past int64's top
    in_range = !PyErr_Occurred();
    PyErr_Clear();
    out->u64 = u;
  } else {
    in_range = overflow == 0 && v >= r.lo && (v < 0 || uint64_t(v) <= r.hi);
    out->i64 = v;
  }
  if (!in_range) {
    std::string got = py::repr(o).cast<std::string>();
    Py_XDECREF(num);
    bad(p, "(" + p.dtype.name() + ") must be an int in " + range_text() + ", got " + got);
  }
  Py_XDECREF(num);
}

const Program::Loaded& Program::loaded_for(Kernel& k, int device) {
  for (auto& l : k.loaded) {
    if (l.device == device) return l;
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& l : k.loaded) {
    if (l.device == device) return l;
  }
  Loaded l;
  l.device = device;
  l.module = std::make_unique<runtime::Module>(k.launch.image, device);
  l.fn = l.module->function(k.launch.entry, k.launch.smem_bytes);
  if (k.launch.cooperative) {
    l.blocks_per_sm = l.fn.max_active_blocks_per_sm(k.launch.threads, k.launch.smem_bytes);
    l.sms = runtime::device_sm_count(device);
    l.resident_blocks = l.blocks_per_sm * l.sms;
  }
  k.loaded.push_back(std::move(l));
  return k.loaded.back();
}

ir::VarValues Program::size_values(const int64_t* dyn, const ArgValue* scalars) const {
  ir::VarValues vars;
  for (int v = 0; v < num_dynamic_; ++v) vars[dynamic_vars_[v].get()] = dyn[v];
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamSpec& p = params_[i];
    if (!p.is_tensor && p.dtype.is_int()) vars[p.var.get()] = scalars[i].i64;
  }
  return vars;
}

void Program::check_scalar_sized(Args& tensors, const ArgValue* scalars, const int64_t* dyn) const {
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamSpec& p = params_[i];
    if (!p.scalar_sized || !tensors[i].defined()) continue;
    ir::VarValues vars = size_values(dyn, scalars);
    for (size_t d = 0; d < p.dims.size(); ++d) {
      if (d >= p.dim_expr.size() || !p.dim_expr[d] || p.dim_var[d] >= 0) continue;
      int64_t want = -1;
      internal_assert(ir::eval_int(p.dim_expr[d], vars, &want)) << "dimension " << d << " cannot be evaluated";
      int64_t got = tensors[i].size(int64_t(d)) * (p.dtype.is_packed() && d + 1 == p.dims.size() ? 2 : 1);
      if (got != want) {
        bad(p, "dimension " + std::to_string(d) + " is " + std::to_string(got) + ", but " +
                   ir::to_string(p.dim_expr[d]) + " = " + std::to_string(want) + " in this call");
      }
    }
  }
}

// Outputs (returned through outs) or workspaces, on the inputs' device, sized from the
// dynamic sizes the inputs gave and the scalar arguments.
void Program::allocate(Args& tensors, const int64_t* dyn, const ArgValue* scalars, int device, bool workspaces,
                       py::object* outs, int* nout) {
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamSpec& p = params_[i];
    if (workspaces ? !p.is_workspace : !p.is_output) continue;
    c10::SmallVector<int64_t, 6> shape(p.dims.size());
    for (size_t d = 0; d < p.dims.size(); ++d) {
      if (d < p.dim_expr.size() && p.dim_expr[d]) {
        ir::VarValues vars = size_values(dyn, scalars);
        int64_t v = -1;
        internal_assert(ir::eval_int(p.dim_expr[d], vars, &v)) << "workspace dimension " << d << " cannot be evaluated";
        if (v < 0) bad(p, "has dimension " + ir::to_string(p.dim_expr[d]) + " = " + std::to_string(v) + " in this call");
        shape[d] = v;
      } else if (p.dim_var[d] >= 0) {
        int64_t v = dyn[p.dim_var[d]];
        if (v < 0) bad(p, "has a dynamic dimension that no input tensor determines");
        shape[d] = v;
      } else {
        shape[d] = p.dims[d];
      }
    }
    auto options = at::TensorOptions().dtype(p.scalar_type).device(at::kCUDA, device);
    if (p.dtype.is_packed()) {
      if (shape.empty() || shape.back() % 2) bad(p, "is packed two elements a byte, so its last dimension must be even");
      shape.back() /= 2;
    }
    if (!p.strides.empty()) {
      c10::SmallVector<int64_t, 6> strides(p.strides.begin(), p.strides.end());
      for (size_t d = 0; d < strides.size(); ++d) {
        if (strides[d] < 0) bad(p, "has a dynamic stride, so the call cannot allocate it: pass it as an input");
        if (p.dtype.is_packed() && d + 1 < strides.size()) strides[d] /= 2;
      }
      tensors[i] = at::empty_strided(shape, strides, options);
    } else {
      tensors[i] = at::empty(shape, options);
    }
    if (outs) outs[(*nout)++] = py::reinterpret_steal<py::object>(THPVariable_Wrap(tensors[i]));
  }
}

py::object Program::call(PyObject* const* inputs, size_t count) {
  size_t expected = params_.size() - num_outputs_ - num_workspaces_;
  if (count != expected) {
    Text os;
    os << kernel_name_ << ": expected " << expected << " argument(s) (";
    bool first = true;
    for (auto& p : params_) {
      if (p.is_output || p.is_workspace) continue;
      os << (first ? "" : ", ") << p.name;
      first = false;
    }
    os << "), got " << count;
    throw ArgumentError(os.str());
  }
  int64_t dyn[kMaxArgs];
  for (int i = 0; i < num_dynamic_; ++i) dyn[i] = -1;
  int device = -1;
  // Fixed-size storage: the launch path allocates nothing on the heap.
  Args tensors(params_.size());
  ArgValue scalars[kMaxArgs] = {};  // zeroed: an entry plan compares recorded scalars whole
  size_t next = 0;
  bool pointers = false;
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamSpec& p = params_[i];
    if (p.is_output || p.is_workspace) continue;
    PyObject* obj = inputs[next++];
    if (p.is_tensor) tensors[i] = check_tensor(p, obj, dyn, &device);
    else if (p.is_pointer()) check_pointer(p, obj, &scalars[i], &device), pointers = true;
    else check_scalar(p, obj, &scalars[i]);
  }
  // Addresses alone (TileLang's `kernel(a.data_ptr(), ...)`): the current device's.
  if (device < 0 && pointers) device = c10::cuda::current_device();
  if (device < 0) {
    throw ArgumentError(kernel_name_ + ": at least one input tensor is needed to choose the device");
  }
  check_scalar_sized(tensors, scalars, dyn);
  if (num_outputs_ == 0 && num_workspaces_ == 0) {
    run(describe(tensors).data(), scalars, dyn, device, nullptr);
    return py::none();
  }
  py::object outs[kMaxArgs];
  int nout = 0;
  allocate(tensors, dyn, scalars, device, false, outs, &nout);
  if (num_workspaces_) allocate(tensors, dyn, scalars, device, true, nullptr, nullptr);
  run(describe(tensors).data(), scalars, dyn, device, nullptr);
  if (num_outputs_ == 0) return py::none();
  if (num_outputs_ == 1) return outs[0];
  py::list list;
  for (int i = 0; i < nout; ++i) list.append(outs[i]);
  return list;
}

void Program::launch(const std::vector<py::object>& args, int64_t stream) {
  std::vector<PyObject*> objects;
  for (auto& a : args) objects.push_back(a.ptr());
  if (needs_tracing(objects.data(), objects.size())) {
    throw ArgumentError(kernel_name_ + ": an argument is a traced or fake tensor (or a TorchDispatchMode is active), "
                        "which has no memory to launch on; call the kernel itself (kernel(...)) to go through its "
                        "torch operator");
  }
  size_t expected = params_.size() - num_workspaces_;
  if (args.size() != expected) {
    throw ArgumentError(kernel_name_ + ": expected " + std::to_string(expected) + " arguments, got " +
                        std::to_string(args.size()));
  }
  int64_t dyn[kMaxArgs];
  for (int i = 0; i < num_dynamic_; ++i) dyn[i] = -1;
  int device = -1;
  Args tensors(params_.size());
  ArgValue scalars[kMaxArgs] = {};  // zeroed: an entry plan compares recorded scalars whole
  size_t next = 0;
  bool pointers = false;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].is_workspace) continue;
    if (params_[i].is_tensor) tensors[i] = check_tensor(params_[i], args[next++].ptr(), dyn, &device);
    else if (params_[i].is_pointer()) check_pointer(params_[i], args[next++].ptr(), &scalars[i], &device), pointers = true;
    else check_scalar(params_[i], args[next++], &scalars[i]);
  }
  if (device < 0 && pointers) device = c10::cuda::current_device();
  if (device < 0) throw ArgumentError(kernel_name_ + ": at least one tensor argument is needed");
  check_scalar_sized(tensors, scalars, dyn);
  if (num_workspaces_) allocate(tensors, dyn, scalars, device, true, nullptr, nullptr);
  run(describe(tensors).data(), scalars, dyn, device, reinterpret_cast<void*>(stream));
}

}  // namespace tegula::bindings
