// tegula._C: lower a kernel, build it with NVRTC through the cache, launch it.
#include <algorithm>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "bindings/bindings.h"
#include "bindings/entry_plans.h"
#include "bindings/launcher.h"
#include "bindings/program.h"
#include "codegen/cuda_printer.h"
#include "ir/functor.h"
#include "ir/printer.h"
#include "runtime/cache.h"
#include "runtime/compile.h"
#include "runtime/compile_pool.h"
#include "runtime/driver.h"
#include "runtime/hash.h"
#include "runtime/nvrtc.h"
#include "runtime/nvrtc_identity.h"
#include "transform/let_values.h"
#include "transform/pipeline.h"

#if __has_include("tegula_build_id.h")
#include "tegula_build_id.h"
#endif
#ifndef TEGULA_BUILD_ID
#define TEGULA_BUILD_ID "dev"
#endif

namespace tegula::bindings {

const ir::Kernel& stage_kernel(const transform::Lowered& lowered, const std::string& stage) {
  if (stage == "final") return lowered.stages.back().second;
  for (auto& [name, k] : lowered.stages) {
    if (name == stage) return k;
  }
  std::string known;
  for (auto& [name, k] : lowered.stages) known += " " + name;
  throw py::value_error("unknown IR stage '" + stage + "'; stages are: final all" + known);
}

namespace {

// TEGULA_LOG=compile (or a list holding it, or "all"): one line per compile stage on stderr.
bool log_compile() {
  const char* v = std::getenv("TEGULA_LOG");
  if (!v || !*v) return false;
  std::string s = v;
  return s == "1" || s == "all" || s.find("compile") != std::string::npos;
}

void log_line(const std::string& kernel, const std::string& stage, double ms, const std::string& detail = "") {
  std::fprintf(stderr, "tegula[compile] %s: %-14s %8.1f ms%s%s\n", kernel.c_str(), stage.c_str(), ms,
               detail.empty() ? "" : "  ", detail.c_str());
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The device library, read once and handed to NVRTC in memory.
struct DeviceLibrary {
  std::vector<std::pair<std::string, std::string>> headers;
  std::string hash;
};
DeviceLibrary& device_library() {
  static DeviceLibrary lib;
  return lib;
}

void set_device_library(const std::string& dir) {
  namespace fs = std::filesystem;
  DeviceLibrary lib;
  runtime::Hasher h;
  std::vector<fs::path> files;
  for (auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ".h") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::string rel = fs::relative(f, dir).generic_string();
    h.field(rel).field(text);
    lib.headers.push_back({rel, text});
  }
  if (lib.headers.empty()) throw CudaError("no device library headers found under " + dir);
  lib.hash = h.hex();
  device_library() = std::move(lib);
}

at::ScalarType scalar_type(ir::DataType t) {
  switch (t.code) {
    case ir::DataType::Float: return t.bits == 16 ? at::kHalf : t.bits == 64 ? at::kDouble : at::kFloat;
    case ir::DataType::BFloat: return at::kBFloat16;
    case ir::DataType::Int: return t.bits <= 8 ? at::kChar : t.bits == 16 ? at::kShort : t.bits == 64 ? at::kLong : at::kInt;
    case ir::DataType::UInt: return t.bits <= 8 ? at::kByte : t.bits == 16 ? at::kUInt16 : t.bits == 64 ? at::kUInt64 : at::kUInt32;
    case ir::DataType::Bool: return at::kBool;
    case ir::DataType::Float8E4M3: return at::kFloat8_e4m3fn;
    case ir::DataType::Float8E5M2: return at::kFloat8_e5m2;
    case ir::DataType::Float8E8M0: return at::kFloat8_e8m0fnu;
    // 4-bit types: the bytes that hold two elements (what a call allocates for an output).
    case ir::DataType::Float4E2M1: return at::kFloat4_e2m1fn_x2;
    case ir::DataType::TFloat32: return at::kFloat;  // stored as float32, as TileLang passes it
    default: return at::kFloat;
  }
}

// The tensor-map element type of a dtype (CUtensorMapDataType's values).
int tensor_map_dtype(ir::DataType t) {
  switch (t.code) {
    case ir::DataType::Float: return t.bits == 16 ? 6 : t.bits == 64 ? 8 : 7;
    case ir::DataType::BFloat: return 9;
    case ir::DataType::Int: return t.bits == 64 ? 5 : t.bits == 32 ? 3 : t.bits == 16 ? 1 : 0;
    case ir::DataType::UInt: return t.bits == 64 ? 4 : t.bits == 32 ? 2 : t.bits == 16 ? 1 : 0;
    default: return 0;
  }
}

// The alignment, in bytes, each global buffer's base address needs: its widest vector
// access, and 16 for the source of a cp.async (the passes prove each such access's offset
// from the base a multiple of its width, so the base is all the launcher has to check).
std::map<const ir::BufferNode*, int> required_alignment(const ir::Kernel& k) {
  std::map<const ir::BufferNode*, int> out;
  auto note = [&](const ir::Buffer& b, int bytes) {
    if (b->scope == ir::Scope::Global && bytes > b->dtype.bytes()) out[b.get()] = std::max(out[b.get()], bytes);
  };
  ir::post_order(k.body, [&](const ir::Stmt& s) {
    if (auto* st = s.as<ir::BufferStoreNode>()) note(st->buffer, st->value.dtype().lanes * st->buffer->dtype.bytes());
  }, [&](const ir::Expr& e) {
    if (auto* ld = e.as<ir::BufferLoadNode>()) note(ld->buffer, ld->dtype.lanes * ld->buffer->dtype.bytes());
    auto* c = e.as<ir::CallNode>();
    if (c && c->op == "cp_async") note(c->args.at(1).as<ir::BufferLoadNode>()->buffer, 16);
  });
  // A tensor map's global address must be 16-byte aligned.
  for (auto& m : k.tensor_maps) out[k.params[m.param].buffer.get()] = std::max(out[k.params[m.param].buffer.get()], 16);
  return out;
}

// tl.dynamic_alignment lets the vectoriser assume a dynamic last dimension of a tensor is
// a multiple of it; the launcher must then refuse a size that is not.
std::vector<int> dynamic_multiples(const ir::Kernel& k, int dynamic_alignment) {
  std::vector<int> out(k.dynamic_vars.size(), 1);
  if (dynamic_alignment <= 1) return out;
  for (auto& p : k.params) {
    if (!p.buffer || p.buffer->shape.empty()) continue;
    for (size_t j = 0; j < k.dynamic_vars.size(); ++j) {
      if (k.dynamic_vars[j].same_as(p.buffer->shape.back())) out[j] = dynamic_alignment;
    }
  }
  return out;
}

struct LoweredKernel {
  std::shared_ptr<ir::Kernel> input;
  transform::Lowered lowered;
  transform::Target target;
  transform::Options options;
  codegen::CudaSource source;
  double compile_seconds = 0;
  bool cache_hit = false;
  // The image once compiled (here or by compile_in_processes): the build takes it, so a
  // kernel is compiled once even with the cache off.
  std::optional<std::vector<char>> image_memo;
  // T.CUDASourceCodeKernel: `source` is the user's CUDA, `input` only its launch (grid,
  // threads, cluster, parameters); no pass ran, and there is no IR body to interpret.
  bool user_source = false;

  void require_ir_body(const char* what) const {
    if (user_source) {
      throw py::value_error(std::string(what) + ": kernel '" + input->name + "' is T.CUDASourceCodeKernel, whose body is "
                            "CUDA source (entry " + source.entry + "), which only the GPU runs");
    }
  }

  std::string ir(const std::string& stage) const {
    if (stage == "final") return ir::to_string(lowered.stages.back().second);
    if (stage == "all") {
      std::string all;
      for (auto& [name, k] : lowered.stages) all += "# ---- after " + name + "\n" + ir::to_string(k) + "\n";
      return all;
    }
    return ir::to_string(stage_kernel(lowered, stage));
  }

  runtime::CompileOptions compile_options() const {
    auto& lib = device_library();
    if (lib.headers.empty()) throw CudaError("the device library was not set (tegula._C.set_device_library)");
    runtime::CompileOptions opts;
    opts.arch = target.arch;
    opts.headers = lib.headers;
    if (options.fast_math) opts.extra_flags.push_back("-use_fast_math");
    auto& cache = runtime::KernelCache::global();
    namespace fs = std::filesystem;
    std::error_code ec;
    opts.pch_dir = cache.disk_enabled() ? (fs::path(cache.dir()) / "pch").string()
                                        : (fs::temp_directory_path(ec) / "tegula-pch").string();
    opts.report_phases = log_compile();
    return opts;
  }

  std::string build_id() const { return std::string(TEGULA_BUILD_ID) + ":" + device_library().hash; }

  std::vector<char> compile_image() {
    if (image_memo) {
      cache_hit = true;
      return *image_memo;
    }
    runtime::CompileOptions opts = compile_options();
    runtime::CompileReport report;
    std::vector<char> image;
    {
      // NVRTC takes a second: other Python threads (the autotuner's pool) run meanwhile.
      py::gil_scoped_release release;
      try {
        image = runtime::compile_cached(source.code, source.entry + ".cu", opts, build_id(), &cache_hit, &report);
      } catch (const CudaError& e) {
        throw CudaError(std::string(e.what()) + "\n(the generated source is kernel.get_kernel_source())");
      }
    }
    if (opts.report_phases) {
      log_line(source.entry, "cache lookup", report.lookup_ms, report.cache);
      if (!cache_hit) {
        std::string detail = report.phases;
        if (report.pch != "none") detail += (detail.empty() ? "pch " : "; pch ") + report.pch;
        log_line(source.entry, "nvrtc", report.nvrtc_ms, detail);
      }
    }
    image_memo = image;
    return image;
  }

  Launch launch_spec() {
    const ir::Kernel& k = lowered.kernel;
    Launch l;
    l.image = compile_image();
    l.entry = source.entry;
    l.grid = k.grid;
    l.threads = k.threads;
    l.smem_bytes = int(k.smem_bytes);
    l.rules.fold = !user_source && codegen::folds_grid(k);  // user CUDA reads blockIdx as launched
    l.cooperative = codegen::launches_cooperatively(k);
    l.event_log = !user_source && codegen::records_events(k);
    l.cluster_dims = k.cluster_dims;
    l.rules.dyn_multiple = dynamic_multiples(k, options.dynamic_alignment);
    for (auto& m : k.tensor_maps) {
      TensorMapSpec t;
      t.param = m.param;
      const ir::Buffer& b = k.params[m.param].buffer;
      t.dtype = tensor_map_dtype(b->dtype);
      t.elem_bytes = b->dtype.bytes();
      t.box.assign(m.box.begin(), m.box.end());
      t.swizzle = m.swizzle;
      l.tensor_maps.push_back(t);
    }
    l.checks = ir::host_checks(lowered.stages.front().second);  // the assumptions as written
    return l;
  }

};

// Whether e can be evaluated from the dynamic sizes alone (no loads, no other variables).
static bool over_dynamic_sizes(const ir::Expr& e, const std::vector<ir::Expr>& dynamic_vars) {
  ir::VarValues values;
  for (auto& v : dynamic_vars) values[v.get()] = 1;
  int64_t out;
  return ir::eval_int(e, values, &out);
}

// Whether `e` is computed from the kernel's integer scalar parameters (and dynamic sizes)
// alone: T.empty((3, n * 2), ...) with `n: T.int32` a parameter, sized at each call.
static bool over_scalars(const ir::Expr& e, const ir::Kernel& k) {
  ir::VarValues values;
  bool any = false;
  for (auto& p : k.params) {
    if (!p.buffer && p.var.dtype().is_int()) values[p.var.get()] = 1, any = true;
  }
  for (auto& v : k.dynamic_vars) values[v.get()] = 1;
  int64_t out;
  return any && ir::eval_int(e, values, &out);
}

// The dynamic size `e` is `a * var + b` of (a > 0, b integers): var's index, else -1. Such a
// dimension (T.Tensor((n * 4,), ...), (n + 1,)) determines var at launch: var = (dim - b) / a.
static int affine_dynamic(const ir::Expr& e, const std::vector<ir::Expr>& dynamic_vars) {
  for (size_t j = 0; j < dynamic_vars.size(); ++j) {
    static const int64_t points[] = {0, 1, 2, 3, 7, 64, 1000};
    int64_t at[7];
    bool ok = true;
    for (int i = 0; ok && i < 7; ++i) {
      ir::VarValues values{{dynamic_vars[j].get(), points[i]}};
      ok = ir::eval_int(e, values, &at[i]);
    }
    if (!ok) continue;  // another variable (or none of these) is in it
    int64_t a = at[1] - at[0];
    for (int i = 0; ok && i < 7; ++i) ok = at[i] == a * points[i] + at[0];
    return ok && a > 0 ? int(j) : -1;
  }
  return -1;
}

// The program of one prim_func: its kernels (one per `with T.Kernel`, launched in order)
// over one argument list, the parameters then `num_workspaces` T.alloc_global buffers.
std::shared_ptr<Program> build_program(const std::vector<std::shared_ptr<LoweredKernel>>& kernels,
                                       const std::vector<int>& out_idx, int num_workspaces) {
  internal_assert(!kernels.empty()) << "build_program needs a kernel";
  const ir::Kernel& k = kernels[0]->lowered.kernel;
  std::map<int, int> align;  // param index -> bytes, over every kernel
  for (auto& lk : kernels) {
    const ir::Kernel& kk = lk->lowered.kernel;
    auto vec = required_alignment(kk);
    for (size_t i = 0; i < kk.params.size(); ++i) {
      if (!kk.params[i].buffer) continue;
      auto it = vec.find(kk.params[i].buffer.get());
      if (it != vec.end()) align[int(i)] = std::max(align[int(i)], it->second);
    }
    // A T.ptr parameter: what the tensors made at its address need (T.make_tensor). An
    // address read in the kernel (a pointer table's) cannot be checked: it is assumed
    // 16-byte aligned, as torch allocates.
    for (size_t i = 0; i < kk.params.size(); ++i) {
      if (!kk.params[i].var) continue;
      for (const ir::Buffer& b : kk.addressed) {
        auto it = vec.find(b.get());
        if (b->address.same_as(kk.params[i].var) && it != vec.end()) align[int(i)] = std::max(align[int(i)], it->second);
      }
    }
  }
  std::vector<ParamSpec> specs;
  int np = int(k.params.size());
  int nuser = np - num_workspaces;
  for (int i = 0; i < np; ++i) {
    const ir::Param& p = k.params[i];
    ParamSpec s;
    s.name = p.name();
    s.is_workspace = i >= nuser;
    if (p.buffer) {
      s.dtype = p.buffer->dtype;
      s.scalar_type = scalar_type(s.dtype);
      for (auto& d : p.buffer->shape) {
        const int64_t* v = ir::as_const_int(d);
        int var = -1;
        for (size_t j = 0; !v && j < k.dynamic_vars.size(); ++j) {
          if (k.dynamic_vars[j].same_as(d)) var = int(j);
        }
        // A workspace may also be sized by an expression over the dynamic sizes, which the
        // launch evaluates (T.alloc_global((T.ceildiv(m, 64), n), ...)).
        bool computed = !v && var < 0 && s.is_workspace && over_dynamic_sizes(d, k.dynamic_vars);
        if (!v && var < 0 && !computed && !s.is_workspace) {
          var = affine_dynamic(d, k.dynamic_vars);  // a * n + b: n read off the dimension
          computed = var >= 0;
        }
        if (!v && var < 0 && !computed && !s.is_workspace && over_scalars(d, k)) {
          computed = true;  // from the scalar arguments: checked (or allocated) once they are read
          s.scalar_sized = true;
        }
        if (!v && var < 0 && !computed) {
          throw py::value_error((s.is_workspace ? "T.alloc_global '" : "parameter '") + s.name + "': shape entry " +
                                ir::to_string(d) + " must be a constant, a T.dynamic variable or a * n + b of one" +
                                (s.is_workspace ? ", or an expression over T.dynamic sizes"
                                                : ", or computed from integer scalar parameters"));
        }
        s.dims.push_back(v ? *v : -1);
        s.dim_var.push_back(var);
        s.dim_expr.push_back(computed ? d : ir::Expr());
      }
      for (auto& st : p.buffer->strides) {
        const int64_t* v = ir::as_const_int(st);
        int var = -1;
        for (size_t j = 0; !v && j < k.dynamic_vars.size(); ++j) {
          if (k.dynamic_vars[j].same_as(st)) var = int(j);
        }
        if (!v && var < 0) {
          throw py::value_error("parameter '" + s.name + "': stride " + ir::to_string(st) +
                                " must be a constant or a T.dynamic variable");
        }
        s.strides.push_back(v ? *v : -1);
        s.stride_var.push_back(var);
      }
      auto it = align.find(i);
      s.align_bytes = it == align.end() ? 0 : it->second;
    } else {
      ir::DataType t = p.var.dtype();
      if (t.bits == 4 || t.code == ir::DataType::Float8E8M0) {
        throw py::value_error("parameter '" + s.name + "': a scalar parameter cannot be " + t.name() +
                              "; pass a float32 (or int32) and T.cast it in the kernel");
      }
      s.is_tensor = false;
      s.dtype = p.var.dtype();
      s.var = p.var;
      auto it = align.find(i);
      s.align_bytes = it == align.end() ? 0 : it->second;
    }
    specs.push_back(std::move(s));
  }
  for (int i : out_idx) {
    int j = i < 0 ? i + nuser : i;
    if (j < 0 || j >= nuser || !specs[j].is_tensor) {
      throw py::value_error("out_idx " + std::to_string(i) + " does not name a tensor parameter of " + k.name);
    }
    specs[j].is_output = true;
  }
  std::vector<Launch> launches;
  for (auto& lk : kernels) launches.push_back(lk->launch_spec());
  return std::make_shared<Program>(k.name, std::move(specs), int(k.dynamic_vars.size()), k.dynamic_vars,
                                   std::move(launches));
}

transform::Options parse_options(const py::dict& d) {
  transform::Options o;
  for (auto item : d) {
    std::string key = py::str(item.first);
    if (key == "fast_math") o.fast_math = item.second.cast<bool>();
    else if (key == "disable_vectorize") o.disable_vectorize = item.second.cast<bool>();
    else if (key == "disable_safe_memory") o.disable_safe_memory = item.second.cast<bool>();
    else if (key == "disable_wgmma") o.disable_wgmma = item.second.cast<bool>();
    else if (key == "disable_tma") o.disable_tma = item.second.cast<bool>();
    else if (key == "disable_warp_specialized") o.disable_warp_specialized = item.second.cast<bool>();
    else if (key == "dynamic_alignment") o.dynamic_alignment = item.second.cast<int>();
    else if (key == "keep_threads") o.keep_threads = item.second.cast<bool>();
    else throw py::value_error("unknown lowering option '" + key + "'");
  }
  return o;
}

}  // namespace

// The tensor parameters a kernel may write, by index: what its torch operator declares as
// mutated (tegula/traced.py). A view's writes are its base tensor's; a tensor over a
// run-time address may be any of them.
static std::vector<int> written_params(const LoweredKernel& l) {
  const ir::Kernel& k = *l.input;
  std::set<const ir::BufferNode*> written;
  bool unknown = l.user_source || !k.body;
  if (!unknown) {
    for (const ir::BufferNode* b : transform::written_buffers(k.body)) {
      while (b->view_of) b = b->view_of.get();
      if (b->address) unknown = true;
      written.insert(b);
    }
  }
  std::vector<int> out;
  for (size_t i = 0; i < k.params.size(); ++i) {
    const ir::Buffer& b = k.params[i].buffer;
    if (b && (unknown || written.count(b.get()))) out.push_back(int(i));
  }
  return out;
}

void init_compile(py::module_& m) {
  init_launcher(m);
  init_entry_plans(m);
  init_layouts(m);
  py::class_<Program, std::shared_ptr<Program>>(m, "Program")
      .def("__call__", [](Program& p, const py::args& a) { return p.call(a); })
      .def_property_readonly("launcher", [](std::shared_ptr<Program> p) { return make_launcher(std::move(p)); })
      .def("launcher_with", [](std::shared_ptr<Program> p, py::object traced) {
        return make_launcher(std::move(p), std::move(traced));
      }, py::arg("traced"), "The launcher, handing calls with traced or fake arguments to `traced` (launcher.h).")
      .def("launch", &Program::launch, py::arg("args"), py::arg("stream") = 0)
      .def_property_readonly("num_outputs", &Program::num_outputs)
      .def_property_readonly("records_events", &Program::records_events)
      .def("set_event_log", &Program::set_event_log, py::arg("address"),
           "The device address of the event log later launches pass to kernels that record events (0: none).")
      .def("save", [](const Program& p) {
        std::string bytes = p.save();
        return py::bytes(bytes);
      }, "The program as bytes for tegula._C.load_program; b'' when it cannot be saved.")
      .def_property_readonly("alignment", [](const Program& p) {
        py::dict d;  // parameter name -> bytes its base address (a T.ptr's address) must be a multiple of
        for (auto& s : p.params()) {
          if (s.is_tensor) d[py::str(s.name)] = std::max(s.align_bytes, s.dtype.bytes());
          else if (s.is_pointer()) d[py::str(s.name)] = std::max(s.align_bytes, 1);
        }
        return d;
      }, "The base-address alignment each tensor argument needs, in bytes (the launcher checks it).")
      .def_property_readonly("launches", [](const Program& p) {
        py::list out;
        for (size_t i = 0; i < p.num_kernels(); ++i) {
          const Launch& l = p.launch_spec(i);
          py::dict d;
          d["entry"] = l.entry;
          d["threads"] = l.threads;
          d["smem_bytes"] = l.smem_bytes;
          d["cooperative"] = l.cooperative;
          d["cluster_dims"] = l.cluster_dims;
          out.append(d);
        }
        return out;
      }, "Per kernel, in launch order, how it is launched: entry, threads, smem_bytes, cooperative (T.sync_grid: "
         "cuLaunchCooperativeKernel) and cluster_dims ([] without clusters).");

  py::class_<LoweredKernel, std::shared_ptr<LoweredKernel>>(m, "Lowered")
      .def_property_readonly("source", [](const LoweredKernel& l) { return l.source.code; })
      .def_property_readonly("written_params", &written_params,
                             "Indices of the tensor parameters the kernel may write (stores, tile ops' destinations, "
                             "atomics); every tensor when that cannot be known (CUDA source, run-time addresses).")
      .def_property_readonly("entry", [](const LoweredKernel& l) { return l.source.entry; })
      .def_property_readonly("smem_bytes", [](const LoweredKernel& l) { return l.lowered.kernel.smem_bytes; })
      .def_property_readonly("threads", [](const LoweredKernel& l) { return l.lowered.kernel.threads; })
      .def_property_readonly("target", [](const LoweredKernel& l) { return l.target.arch; })
      .def_property_readonly("cache_hit", [](const LoweredKernel& l) { return l.cache_hit; })
      .def("ir", &LoweredKernel::ir, py::arg("stage") = "final")
      .def("stages", [](const LoweredKernel& l) {
        std::vector<std::string> names;
        for (auto& s : l.lowered.stages) names.push_back(s.first);
        return names;
      })
      .def("compile", [](LoweredKernel& l) {
        std::vector<char> image = l.compile_image();
        return py::bytes(image.data(), image.size());
      }, "Compiles to a cubin (through the cache) without loading it; works without a GPU.")
      .def("build", [](std::shared_ptr<LoweredKernel> l, const std::vector<int>& out_idx) {
        return build_program({l}, out_idx, 0);
      }, py::arg("out_idx") = std::vector<int>{})
      .def_property_readonly("user_source", [](const LoweredKernel& l) { return l.user_source; })
      .def("reference", [](const LoweredKernel& l, const py::list& args, const py::list& memory) {
        l.require_ir_body("tegula.testing.reference");
        run_reference(l.lowered.stages.front().second, args, memory);
      }, py::arg("args"), py::arg("memory") = py::list(), "Runs the kernel as written on the CPU (tegula.testing.reference).")
      .def("simulate", [](const LoweredKernel& l, const py::list& args, const py::list& memory) {
        l.require_ir_body("tegula.testing.simulate");
        return run_simulator(l.lowered, args, memory, [&] {
          transform::Options o = l.options;
          o.disable_warp_specialized = true;
          return transform::lower(*l.input, l.target, o, false);
        });
      }, py::arg("args"), py::arg("memory") = py::list(),
         "Runs the lowered kernel thread by thread on the CPU (tegula.testing.simulate).")
      .def_property_readonly("warp_specialized", [](const LoweredKernel& l) { return l.lowered.kernel.consumer_threads > 0; })
      .def_property_readonly("tile_threads", [](const LoweredKernel& l) {
        const ir::Kernel& k = l.lowered.kernel;
        return k.consumer_threads ? k.consumer_threads : k.threads;
      }, "The threads that run the tile program and hold its fragments: T.Kernel's, or two warpgroups for one "
         "whose fragments do not fit its registers (src/transform/widen_threads.h); a producer warpgroup not counted.")
      .def_property_readonly("tensor_maps", [](const LoweredKernel& l) { return l.lowered.kernel.tensor_maps.size(); })
      .def_property_readonly("records_events", [](const LoweredKernel& l) {
        return !l.user_source && codegen::records_events(l.lowered.kernel);
      })
      .def("count_work", [](const LoweredKernel& l, const std::string& stage, const py::dict& values,
                            const py::dict& tensors, bool per_thread, int64_t dense_limit) {
        l.require_ir_body("the work count");
        return count_work(l.lowered, stage, values, tensors, per_thread, dense_limit);
      }, py::arg("stage") = "expand_tile_ops", py::arg("values") = py::dict(), py::arg("tensors") = py::dict(),
         py::arg("per_thread") = false, py::arg("dense_limit") = int64_t(1) << 22,
         "FLOPs and bytes over the whole grid (src/analysis/work_counts.h), as a dict.")
      .def("dynamic_sizes", [](const LoweredKernel& l) { return dynamic_sizes(l.lowered); })
      .def("layouts", [](const LoweredKernel& l) { return describe_layouts(l.lowered); },
           "Per fragment and shared buffer the kernel declares, the layout the passes chose (a dict each).")
      .def("register_liveness", [](const LoweredKernel& l) { return describe_register_liveness(l.lowered); },
           "Each fragment's registers per thread and the most live at once (a dict; None without lower_fragments).")
      .def("compile_log", [](LoweredKernel& l) {
        return runtime::compile(l.source.code, l.source.entry + ".cu", l.compile_options()).log;
      }, "Compiles without the cache and returns NVRTC's (and ptxas') warnings; works without a GPU.");

  m.def("lower", [](std::shared_ptr<ir::Kernel> k, const std::string& target, const py::dict& options) {
    auto l = std::make_shared<LoweredKernel>();
    l->input = k;
    l->target = transform::Target::parse(target);
    l->options = parse_options(options);
    const char* dump = std::getenv("TEGULA_DUMP_IR");
    auto t0 = std::chrono::steady_clock::now();
    double lower_ms = 0;
    auto t1 = t0;
    {
      // Pure C++ on the kernel's own copy: other Python threads (par_compile's) lower meanwhile.
      py::gil_scoped_release release;
      l->lowered = transform::lower(*k, l->target, l->options, dump && *dump && std::string(dump) != "0");
      lower_ms = ms_since(t0);
      t1 = std::chrono::steady_clock::now();
      l->source = codegen::print_cuda(l->lowered.kernel, l->target);
    }
    if (log_compile()) {
      log_line(k->name, "passes", lower_ms, std::to_string(l->lowered.stages.size() - 1) + " passes, " + target);
      log_line(k->name, "print cuda", ms_since(t1), std::to_string(l->source.code.size()) + " bytes");
    }
    return l;
  }, py::arg("kernel"), py::arg("target"), py::arg("options") = py::dict());

  m.def("compile_in_processes", [](const std::vector<std::shared_ptr<LoweredKernel>>& kernels, int workers) {
    // par_compile's batch: what the cache lacks is compiled in `workers` forked processes
    // (runtime/compile_pool.h) and stored, and every kernel keeps its image for its build.
    // Per kernel, None or the error text its compile gave (the caller compiles those here
    // again, for the error with its DSL line).
    auto& cache = runtime::KernelCache::global();
    std::vector<runtime::PoolJob> jobs;
    std::vector<std::pair<size_t, std::string>> pending;  // (kernel, cache key)
    std::vector<py::object> out(kernels.size(), py::none());
    for (size_t i = 0; i < kernels.size(); ++i) {
      LoweredKernel& l = *kernels[i];
      if (l.image_memo) continue;
      runtime::CompileOptions opts = l.compile_options();
      opts.report_phases = false;
      std::string name = l.source.entry + ".cu";
      std::string key = runtime::compile_key(cache, l.source.code, name, opts, l.build_id());
      if (auto hit = cache.lookup(key)) {
        l.image_memo = std::move(*hit);
        continue;
      }
      pending.push_back({i, key});
      jobs.push_back({l.source.code, name, opts});
    }
    std::vector<runtime::PoolResult> results;
    try {
      py::gil_scoped_release release;
      // Ctrl-C while the workers run: they are killed, and the KeyboardInterrupt goes up.
      results = runtime::compile_in_processes(jobs, workers, [] {
        py::gil_scoped_acquire gil;
        return PyErr_CheckSignals() != 0;
      });
    } catch (const runtime::PoolInterrupted&) {
      throw py::error_already_set();
    }
    for (size_t j = 0; j < results.size(); ++j) {
      auto& [i, key] = pending[j];
      if (!results[j].ok) {
        out[i] = py::str(results[j].error);
        continue;
      }
      cache.store(key, results[j].image);
      kernels[i]->image_memo = std::move(results[j].image);
    }
    return out;
  }, py::arg("kernels"), py::arg("workers"));

  m.def("lower_source", [](std::shared_ptr<ir::Kernel> k, const std::string& target, const std::string& code,
                           const std::string& entry, const py::dict& options) {
    // T.CUDASourceCodeKernel: the user's translation unit, launched as `entry` with the
    // kernel's arguments in the generated kernels' order (tensor pointers and scalars as
    // declared, then the T.dynamic sizes).
    auto l = std::make_shared<LoweredKernel>();
    l->input = k;
    l->target = transform::Target::parse(target);
    l->options = parse_options(options);
    l->lowered.kernel = *k;
    l->lowered.stages = {{"input", *k}};
    l->source = codegen::CudaSource{code, entry};
    l->user_source = true;
    return l;
  }, py::arg("kernel"), py::arg("target"), py::arg("source"), py::arg("entry"), py::arg("options") = py::dict());

  m.def("load_program", [](const py::bytes& b) { return Program::load(std::string(b)); }, py::arg("data"),
        "A Program from Program.save()'s bytes: launchable, without lowering.");
  m.def("cache_get", [](const std::string& key) -> py::object {
    auto v = runtime::KernelCache::global().lookup(key);
    if (!v) return py::none();
    return py::bytes(v->data(), v->size());
  }, py::arg("key"), "A kernel-cache entry by key (a hex string), or None.");
  m.def("cache_put", [](const std::string& key, const py::bytes& b) {
    std::string data(b);
    runtime::KernelCache::global().store(key, std::vector<char>(data.begin(), data.end()));
  }, py::arg("key"), py::arg("data"), "Stores a kernel-cache entry (memory, and disk when enabled).");
  m.def("cache_disk_enabled", [] { return runtime::KernelCache::global().disk_enabled(); });
  m.def("build_id", [] { return std::string(TEGULA_BUILD_ID) + ":" + device_library().hash; },
        "The compiler core's build stamp and the device library's hash: what a cached artifact depends on.");
  m.def("build_program", &build_program, py::arg("kernels"), py::arg("out_idx"), py::arg("num_workspaces"));
  m.def("set_device_library", &set_device_library, py::arg("include_dir"));
  m.def("nvrtc_version", &runtime::nvrtc_version);
  m.def("nvrtc_version_cached", [] {
    auto& cache = runtime::KernelCache::global();
    return cache.disk_enabled() ? runtime::nvrtc_version_cached(cache.dir()) : runtime::nvrtc_version();
  }, "nvrtc_version(), read from the record next to the disk cache when it still matches (no NVRTC load).");
  m.def("driver_available", &runtime::driver_available);
  m.def("device_arch", &runtime::device_arch, py::arg("device") = 0);
  m.def("device_name", &runtime::device_name, py::arg("device") = 0);
  m.def("cache_dir", [] { return runtime::KernelCache::global().dir(); });
  m.def("set_cache_enabled", [](bool on) { runtime::KernelCache::global().set_disk_enabled(on); });
  m.def("clear_memory_cache", [] { runtime::KernelCache::global().clear_memory(); });
  m.def("cache_stats", [] {
    auto s = runtime::KernelCache::global().stats();
    py::dict d;
    d["memory_hits"] = s.memory_hits;
    d["disk_hits"] = s.disk_hits;
    d["misses"] = s.misses;
    d["stores"] = s.stores;
    d["rejected"] = s.rejected;
    return d;
  });
}

}  // namespace tegula::bindings
