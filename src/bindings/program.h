// A compiled kernel bound to torch: argument checks, output allocation and launch.
#pragma once
#include <c10/util/SmallVector.h>
#include <torch/extension.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ir/analyzer.h"
#include "ir/host_checks.h"
#include "ir/stmt.h"
#include "runtime/driver.h"

namespace tegula::bindings {

// What a launch checks of one kernel parameter, decided once at build time.
struct ParamSpec {
  std::string name;
  bool is_tensor = true;
  ir::DataType dtype;
  at::ScalarType scalar_type = at::kFloat;
  std::vector<int64_t> dims;       // -1 where the dimension is a dynamic variable
  std::vector<int> dim_var;        // index into the kernel's dynamic vars, or -1
  // Workspaces: a dimension computed from the dynamic sizes; tensors: a * n + b of a dynamic
  // size, or (scalar_sized) one computed from the scalar arguments; else null.
  std::vector<ir::Expr> dim_expr;
  bool scalar_sized = false;
  // T.StridedTensor: per dimension a constant stride (in elements), or -1 where it is the
  // dynamic var stride_var[d]; empty for a contiguous tensor.
  std::vector<int64_t> strides;
  std::vector<int> stride_var;
  int align_bytes = 0;             // data_ptr alignment the generated wide and async accesses need
  bool is_output = false;
  bool is_workspace = false;       // T.alloc_global: allocated per call, never passed nor returned
  ir::Expr var;                    // scalar parameters: their variable
  // T.ptr: an address, given as a CUDA tensor (its data_ptr) or an int (align_bytes: what
  // the tensors T.make_tensor makes at it need).
  bool is_pointer() const { return !is_tensor && dtype.code == ir::DataType::Handle; }
};

constexpr int kMaxArgs = 64;

// One kernel argument as cuLaunchKernel reads it (from the first byte: little-endian, so
// an int64 holds any narrower integer too).
union ArgValue {
  void* ptr;
  int64_t i64;
  uint64_t u64;
  float f32;
  double f64;
  uint16_t u16;  // float16 / bfloat16 bits
};

// How the launch grid is derived from the logical one (the kernel's T.Kernel extents).
struct GridRules {
  bool fold = false;             // y (times z) spread over blockIdx.y and .z: codegen::folds_grid
  std::vector<int> dyn_multiple;  // per dynamic var: its value must be a multiple (tl.dynamic_alignment)
};
using Args = c10::SmallVector<at::Tensor, 8>;

// What a launch reads of one tensor argument: its address, and for a tensor map its sizes
// and strides (in elements). Built from the call's tensors, or from a recorded entry
// plan (entry_plans.h) without making a tensor.
struct TensorDesc {
  void* ptr = nullptr;
  int rank = 0;
  const int64_t* sizes = nullptr;
  const int64_t* strides = nullptr;
};
using Descs = c10::SmallVector<TensorDesc, 8>;
Descs describe(const Args& tensors);

// A tensor map the launch encodes for a kernel (ir::Kernel::TensorMap, with the element
// type resolved), from the tensor the call passes for `param`.
struct TensorMapSpec {
  int param = 0;
  int dtype = 0;       // CUtensorMapDataType
  int elem_bytes = 2;
  std::vector<uint32_t> box;  // innermost first
  int swizzle = 0;
};

// A T.assume the launcher checks (ir/host_checks.h).
using ir::HostCheck;

// One kernel of a program: what its launch needs besides the shared arguments.
struct Launch {
  std::string entry;
  std::vector<char> image;
  std::vector<ir::Expr> grid;
  std::vector<HostCheck> checks;
  int threads = 0, smem_bytes = 0;
  GridRules rules;
  std::vector<TensorMapSpec> tensor_maps;  // passed after the dynamic sizes, in order
  // T.sync_grid: launched cooperatively, a grid of at most the blocks the GPU holds at once.
  bool cooperative = false;
  // Thread block clusters (compiled into the kernel): each must divide its grid extent.
  std::vector<int64_t> cluster_dims;
  // Records instrumentation events (codegen::records_events): its last parameter is the
  // program's event log (null unless a tool set one).
  bool event_log = false;
};

// A compiled prim_func: one kernel per `with T.Kernel` block, launched in order on one
// stream by one call, over one argument list (parameters, then the workspaces).
class Program : public std::enable_shared_from_this<Program> {
 public:
  Program(std::string kernel_name, std::vector<ParamSpec> params, int num_dynamic,
          std::vector<ir::Expr> dynamic_vars, std::vector<Launch> launches);

  // inputs: the caller's arguments (tensors, ints, floats) in parameter order, outputs
  // (params marked is_output) and workspaces left out. Returns the outputs (None, one
  // tensor, or a list). The vector form is the launcher's (launcher.cc): no tuple.
  py::object call(PyObject* const* inputs, size_t count);
  py::object call(const py::args& inputs) { return call(reinterpret_cast<PyTupleObject*>(inputs.ptr())->ob_item, inputs.size()); }
  // Every parameter given (workspaces excepted), on an explicit stream (0: torch's current stream).
  void launch(const std::vector<py::object>& args, int64_t stream);
  const std::vector<ParamSpec>& params() const { return params_; }
  const std::string& name() const { return kernel_name_; }
  int num_outputs() const { return num_outputs_; }
  int num_dynamic() const { return num_dynamic_; }
  size_t num_kernels() const { return kernels_.size(); }
  const Launch& launch_spec(size_t i) const { return kernels_.at(i).launch; }
  // The event log the next launches pass to kernels that record events (iket.h's IketLog,
  // a device address; 0 for none: they record nothing). tegula.tools.cuda.iket sets one
  // per call; the kernels read it when launched, so a later change leaves them unaffected.
  void set_event_log(uint64_t address) { event_log_ = reinterpret_cast<void*>(address); }
  // Launches kernels with arguments an entry plan recorded (entry_plans.cc): tensors as
  // descriptors, scalars and dynamic sizes as the recorded call had them.
  void replay(const TensorDesc* tensors, const ArgValue* scalars, const int64_t* dyn, int device);
  bool records_events() const {
    for (auto& k : kernels_) {
      if (k.launch.event_log) return true;
    }
    return false;
  }

  // The program as bytes a later process can load() and launch without lowering anything
  // (program_io.cc); "" when a grid extent is an expression save() cannot write.
  std::string save() const;
  static std::shared_ptr<Program> load(const std::string& bytes);

 private:
  struct Loaded {
    int device = -1;
    std::unique_ptr<runtime::Module> module;
    runtime::Function fn;
    // A cooperative kernel's most blocks at once on this device: per SM times the SMs.
    int64_t resident_blocks = 0, blocks_per_sm = 0, sms = 0;
  };
  // Encoded tensor maps of recent calls, per map of a kernel: encoding costs about a
  // microsecond, a hit a compare of the pointer and the sizes.
  struct MapCacheEntry {
    const void* ptr = nullptr;
    int64_t dims[5] = {0, 0, 0, 0, 0};
    alignas(64) unsigned char map[128];
  };
  struct MapCache {
    MapCacheEntry entries[4];
    int next = 0;
  };
  struct Kernel {
    Launch launch;
    std::vector<MapCache> map_cache;
    std::vector<int64_t> const_grid;  // empty unless every grid extent is a constant
    std::vector<Loaded> loaded;
  };
  const Loaded& loaded_for(Kernel& k, int device);
  void allocate(Args& tensors, const int64_t* dyn, const ArgValue* scalars, int device, bool workspaces,
                py::object* outs, int* nout);
  // The values of the dynamic sizes and integer scalar arguments, for evaluating dim_expr.
  ir::VarValues size_values(const int64_t* dyn, const ArgValue* scalars) const;
  // The dimensions of tensors computed from the scalar arguments, against their values.
  void check_scalar_sized(Args& tensors, const ArgValue* scalars, const int64_t* dyn) const;
  void run(const TensorDesc* tensors, const ArgValue* scalars, const int64_t* dyn, int device, void* stream);
  [[noreturn]] void bad(const ParamSpec& p, const std::string& what) const;
  at::Tensor check_tensor(const ParamSpec& p, PyObject* obj, int64_t* dyn, int* device) const;
  void check_strides(const ParamSpec& p, const at::Tensor& t, int64_t* dyn) const;
  void check_scalar(const ParamSpec& p, py::handle obj, ArgValue* out) const;
  void check_pointer(const ParamSpec& p, PyObject* obj, ArgValue* out, int* device) const;
  runtime::Dim3 launch_grid(const Kernel& k, const int64_t* ext, const int64_t* dyn) const;
  // The launch-wide checks of a grid barrier and of clusters (program.cc).
  void check_cooperative(const Kernel& k, const Loaded& l, runtime::Dim3 grid, const int64_t* dyn) const;
  void check_clusters(const Kernel& k, const int64_t* ext, const int64_t* dyn) const;
  std::string dynamic_sizes_text(const int64_t* dyn) const;
  void encode_maps(Kernel& k, const TensorDesc* tensors, unsigned char (*out)[128]);

  std::string kernel_name_;
  std::vector<ParamSpec> params_;
  int num_dynamic_, num_outputs_ = 0, num_workspaces_ = 0;
  std::vector<ir::Expr> dynamic_vars_;
  std::vector<int> dyn_multiple_;  // per dynamic var: the multiple every kernel relies on
  std::vector<Kernel> kernels_;
  void* event_log_ = nullptr;
  std::mutex mu_;
};

}  // namespace tegula::bindings
