#include "bindings/program.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>


#include "bindings/bindings.h"
#include "ir/analyzer.h"

namespace tegula::bindings {

namespace {


union ArgValue {
  void* ptr;
  int32_t i32;
  int64_t i64;
  float f32;
  double f64;
};

std::string shape_str(const ParamSpec& p) {
  Text os;
  os << "(";
  for (size_t d = 0; d < p.dims.size(); ++d) os << (d ? ", " : "") << (p.dims[d] < 0 ? "?" : std::to_string(p.dims[d]));
  os << ")";
  return os.str();
}

}  // namespace

Program::Program(std::string kernel_name, std::string entry, std::vector<char> image, std::vector<ParamSpec> params,
                 int num_dynamic, std::vector<ir::Expr> grid, std::vector<ir::Expr> dynamic_vars, int threads,
                 int smem_bytes)
    : kernel_name_(std::move(kernel_name)), entry_(std::move(entry)), image_(std::move(image)),
      params_(std::move(params)), num_dynamic_(num_dynamic), grid_(std::move(grid)),
      dynamic_vars_(std::move(dynamic_vars)), threads_(threads), smem_bytes_(smem_bytes) {
  for (auto& p : params_) num_outputs_ += p.is_output;
  bool all_const = true;
  for (auto& g : grid_) {
    const int64_t* v = ir::as_const_int(g);
    if (v) const_grid_.push_back(*v);
    else all_const = false;
  }
  if (!all_const) const_grid_.clear();
  internal_assert(params_.size() + num_dynamic_ <= size_t(kMaxArgs)) << "too many kernel parameters";
}

void Program::bad(const ParamSpec& p, const std::string& what) const {
  throw ArgumentError(kernel_name_ + ": argument '" + p.name + "' " + what);
}

at::Tensor Program::check_tensor(const ParamSpec& p, py::handle obj, int64_t* dyn, int* device) const {
  if (!THPVariable_Check(obj.ptr())) bad(p, std::string("must be a torch.Tensor, got ") + py::str(obj.get_type().attr("__name__")).cast<std::string>());
  at::Tensor t = THPVariable_Unpack(obj.ptr());
  if (t.scalar_type() != p.scalar_type) {
    bad(p, "must have dtype " + p.dtype.name() + ", got " + std::string(c10::toString(t.scalar_type())));
  }
  if (!t.is_cuda()) bad(p, "must be on a CUDA device, got a tensor on " + t.device().str());
  if (t.dim() != int64_t(p.dims.size())) {
    bad(p, "must have shape " + shape_str(p) + " (" + std::to_string(p.dims.size()) + " dimensions), got " +
               std::to_string(t.dim()) + " dimensions");
  }
  for (size_t d = 0; d < p.dims.size(); ++d) {
    int64_t got = t.size(d);
    if (p.dim_var[d] >= 0) {
      int64_t& v = dyn[p.dim_var[d]];
      if (v < 0) {
        v = got;
      } else if (v != got) {
        bad(p, "dimension " + std::to_string(d) + " is " + std::to_string(got) + " but the same dynamic size was " +
                   std::to_string(v) + " in an earlier argument");
      }
    } else if (got != p.dims[d]) {
      bad(p, "must have shape " + shape_str(p) + ", got dimension " + std::to_string(d) + " = " + std::to_string(got));
    }
  }
  if (!t.is_contiguous()) bad(p, "must be contiguous (row-major); call .contiguous() first");
  if (p.align_bytes > 1 && reinterpret_cast<uintptr_t>(t.data_ptr()) % p.align_bytes != 0) {
    bad(p, "must start at an address aligned to " + std::to_string(p.align_bytes) +
               " bytes (the kernel uses vector accesses); got a view at an unaligned offset");
  }
  if (*device < 0) {
    *device = t.get_device();
  } else if (t.get_device() != *device) {
    bad(p, "is on cuda:" + std::to_string(t.get_device()) + " but earlier arguments are on cuda:" + std::to_string(*device));
  }
  return t;
}

const Program::Loaded& Program::loaded_for(int device) {
  for (auto& l : loaded_) {
    if (l.device == device) return l;
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& l : loaded_) {
    if (l.device == device) return l;
  }
  Loaded l;
  l.device = device;
  l.module = std::make_unique<runtime::Module>(image_, device);
  l.fn = l.module->function(entry_, smem_bytes_);
  loaded_.push_back(std::move(l));
  return loaded_.back();
}

py::object Program::call(const py::args& inputs) {
  size_t expected = params_.size() - num_outputs_;
  if (inputs.size() != expected) {
    Text os;
    os << kernel_name_ << ": expected " << expected << " argument(s) (";
    bool first = true;
    for (auto& p : params_) {
      if (p.is_output) continue;
      os << (first ? "" : ", ") << p.name;
      first = false;
    }
    os << "), got " << inputs.size();
    throw ArgumentError(os.str());
  }
  int64_t dyn[kMaxArgs];
  for (int i = 0; i < num_dynamic_; ++i) dyn[i] = -1;
  int device = -1;
  // Fixed-size storage: the launch path allocates nothing on the heap.
  Args tensors(params_.size());
  Handles scalars(params_.size());
  size_t next = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamSpec& p = params_[i];
    if (p.is_output) continue;
    py::handle obj = inputs[next++];
    if (p.is_tensor) tensors[i] = check_tensor(p, obj, dyn, &device);
    else scalars[i] = obj;
  }
  if (device < 0) {
    throw ArgumentError(kernel_name_ + ": at least one input tensor is needed to choose the device");
  }
  py::object outs[kMaxArgs];
  int nout = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamSpec& p = params_[i];
    if (!p.is_output) continue;
    std::vector<int64_t> shape(p.dims.size());
    for (size_t d = 0; d < p.dims.size(); ++d) {
      if (p.dim_var[d] >= 0) {
        int64_t v = dyn[p.dim_var[d]];
        if (v < 0) bad(p, "has a dynamic dimension that no input tensor determines");
        shape[d] = v;
      } else {
        shape[d] = p.dims[d];
      }
    }
    tensors[i] = at::empty(shape, at::TensorOptions().dtype(p.scalar_type).device(at::kCUDA, device));
    outs[nout++] = py::reinterpret_steal<py::object>(THPVariable_Wrap(tensors[i]));
  }
  run(tensors, scalars, device, nullptr);
  if (num_outputs_ == 0) return py::none();
  if (num_outputs_ == 1) return outs[0];
  py::list list;
  for (int i = 0; i < nout; ++i) list.append(outs[i]);
  return list;
}

void Program::launch(const std::vector<py::object>& args, int64_t stream) {
  if (args.size() != params_.size()) {
    throw ArgumentError(kernel_name_ + ": expected " + std::to_string(params_.size()) + " arguments, got " +
                        std::to_string(args.size()));
  }
  int64_t dyn[kMaxArgs];
  for (int i = 0; i < num_dynamic_; ++i) dyn[i] = -1;
  int device = -1;
  Args tensors(params_.size());
  Handles scalars(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].is_tensor) tensors[i] = check_tensor(params_[i], args[i], dyn, &device);
    else scalars[i] = args[i];
  }
  if (device < 0) throw ArgumentError(kernel_name_ + ": at least one tensor argument is needed");
  run(tensors, scalars, device, reinterpret_cast<void*>(stream));
}

void Program::run(Args& tensors, const Handles& scalars, int device, void* stream) {
  ArgValue values[kMaxArgs];
  void* argv[kMaxArgs];
  ir::VarValues dyn_values;
  size_t n = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamSpec& p = params_[i];
    if (p.is_tensor) {
      values[n].ptr = tensors[i].data_ptr();
    } else if (p.dtype.is_float()) {
      double v = scalars[i].cast<double>();
      if (p.dtype.bits == 64) values[n].f64 = v;
      else values[n].f32 = float(v);
    } else {
      int64_t v = scalars[i].cast<int64_t>();
      if (p.dtype.bits == 64) values[n].i64 = v;
      else values[n].i32 = int32_t(v);
    }
    argv[n] = &values[n];
    ++n;
  }
  // Dynamic sizes: read off the tensors, in the order the kernel declares them.
  int64_t dyn[kMaxArgs];
  for (int v = 0; v < num_dynamic_; ++v) dyn[v] = -1;
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamSpec& p = params_[i];
    if (!p.is_tensor) continue;
    for (size_t d = 0; d < p.dims.size(); ++d) {
      if (p.dim_var[d] >= 0 && dyn[p.dim_var[d]] < 0) dyn[p.dim_var[d]] = tensors[i].size(d);
    }
  }
  for (int v = 0; v < num_dynamic_; ++v) {
    values[n].i32 = int32_t(dyn[v]);
    argv[n] = &values[n];
    ++n;
  }
  runtime::Dim3 grid;
  unsigned* g[3] = {&grid.x, &grid.y, &grid.z};
  for (size_t d = 0; d < grid_.size(); ++d) {
    int64_t ext;
    if (!const_grid_.empty()) {
      ext = const_grid_[d];
    } else {
      if (dyn_values.empty()) {
        for (int v = 0; v < num_dynamic_; ++v) dyn_values[dynamic_vars_[v].get()] = dyn[v];
        for (size_t i = 0; i < params_.size(); ++i) {
          if (!params_[i].is_tensor && params_[i].dtype.is_int()) dyn_values[params_[i].var.get()] = scalars[i].cast<int64_t>();
        }
      }
      internal_assert(ir::eval_int(grid_[d], dyn_values, &ext)) << "grid extent depends on a scalar argument";
    }
    if (ext <= 0) return;  // nothing to do for an empty tensor
    *g[d] = unsigned(ext);
  }
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  const Loaded& l = loaded_for(device);
  void* s = stream ? stream : static_cast<void*>(c10::cuda::getCurrentCUDAStream(device).stream());
  l.fn.launch(grid, runtime::Dim3{unsigned(threads_), 1, 1}, smem_bytes_, s, argv);
}

}  // namespace tegula::bindings
