// The launch half of Program (program.h): the grid of each kernel and its checks, tensor
// maps, and cuLaunchKernel over one call's arguments, from a call (program.cc) or an entry
// plan's replay (entry_plans.cc).
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <cstring>
#include <optional>

#include "bindings/bindings.h"
#include "bindings/entry_plans.h"
#include "bindings/program.h"
#include "ir/analyzer.h"
#include "ir/printer.h"

namespace tegula::bindings {

namespace {

constexpr int64_t kMaxGridX = (int64_t(1) << 31) - 1;
constexpr int64_t kMaxGridYZ = 65535;

}  // namespace

// ext: the logical grid (T.Kernel's extents, at least 1 each). The hardware allows
// 2^31 - 1 blocks in x and 65535 in y and z; a kernel printed with a folded grid
// (codegen::folds_grid) takes y * z blocks spread over y and z, rows of 65535.
runtime::Dim3 Program::launch_grid(const Kernel& k, const int64_t* ext, const int64_t* dyn) const {
  auto too_large = [&](const std::string& what) {
    Text os;
    os << kernel_name_ << ": the launch needs " << what << dynamic_sizes_text(dyn);
    os << ", more than a CUDA grid holds; use larger tiles or split the problem";
    throw ArgumentError(os.str());
  };
  if (ext[0] > kMaxGridX) too_large(std::to_string(ext[0]) + " blocks along x (at most " + std::to_string(kMaxGridX) + ")");
  if (!k.launch.rules.fold) {
    if (ext[1] > kMaxGridYZ || ext[2] > kMaxGridYZ) {
      too_large(std::to_string(ext[1]) + " x " + std::to_string(ext[2]) + " blocks along y and z (at most 65535 each)");
    }
    return runtime::Dim3{unsigned(ext[0]), unsigned(ext[1]), unsigned(ext[2])};
  }
  if (ext[1] > kMaxGridYZ * kMaxGridYZ || ext[2] > kMaxGridYZ * kMaxGridYZ ||
      ext[1] * ext[2] > kMaxGridYZ * kMaxGridYZ) {
    too_large(std::to_string(ext[1]) + " x " + std::to_string(ext[2]) + " blocks along y and z (at most " +
              std::to_string(kMaxGridYZ * kMaxGridYZ) + " together)");
  }
  int64_t yz = ext[1] * ext[2];
  int64_t gy = std::min(yz, kMaxGridYZ);
  return runtime::Dim3{unsigned(ext[0]), unsigned(gy), unsigned((yz + gy - 1) / gy)};
}

// " (with n=1000 m=64)" when the program has dynamic sizes, else "".
std::string Program::dynamic_sizes_text(const int64_t* dyn) const {
  if (num_dynamic_ == 0) return "";
  Text os;
  os << " (with";
  for (int v = 0; v < num_dynamic_; ++v) os << " " << dynamic_vars_[v].as<ir::VarNode>()->name << "=" << dyn[v];
  os << ")";
  return os.str();
}

// A cluster is a cluster_dims tile of the grid: the launch fails unless each divides.
void Program::check_clusters(const Kernel& k, const int64_t* ext, const int64_t* dyn) const {
  const auto& c = k.launch.cluster_dims;
  if (c.empty() || (ext[0] % c[0] == 0 && ext[1] % c[1] == 0 && ext[2] % c[2] == 0)) return;
  Text os;
  os << kernel_name_ << ": cluster_dims=(" << c[0] << ", " << c[1] << ", " << c[2]
     << ") must divide the grid, but this call's grid is (" << ext[0] << ", " << ext[1] << ", " << ext[2] << ")"
     << dynamic_sizes_text(dyn) << "; pick sizes whose grid extents are multiples of the cluster's";
  throw ArgumentError(os.str());
}

// A grid barrier waits for every block: all of them must be resident at once, which
// cuLaunchCooperativeKernel refuses with a bare error code past the limit.
void Program::check_cooperative(const Kernel& k, const Loaded& l, runtime::Dim3 grid, const int64_t* dyn) const {
  int64_t blocks = int64_t(grid.x) * grid.y * grid.z;
  if (blocks <= l.resident_blocks) return;
  Text os;
  os << kernel_name_ << ": T.sync_grid needs every block of the grid resident on the GPU at once, but the grid ("
     << grid.x << ", " << grid.y << ", " << grid.z << ") has " << blocks << " blocks" << dynamic_sizes_text(dyn)
     << " and this GPU holds at most " << l.resident_blocks << " (" << l.blocks_per_sm << " per SM x " << l.sms
     << " SMs) of " << k.launch.threads << " threads and " << k.launch.smem_bytes
     << " bytes of shared memory: launch at most that many blocks (e.g. one per SM, each looping over the work)";
  throw ArgumentError(os.str());
}

Descs describe(const Args& tensors) {
  Descs descs(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    if (!t.defined()) continue;
    descs[i] = TensorDesc{t.data_ptr(), int(t.dim()), t.sizes().data(), t.strides().data()};
  }
  return descs;
}

void Program::replay(const TensorDesc* tensors, const ArgValue* scalars, const int64_t* dyn, int device) {
  run(tensors, scalars, dyn, device, nullptr);
}

void Program::run(const TensorDesc* tensors, const ArgValue* scalars, const int64_t* dyn, int device, void* stream) {
  if (EntryRecorder* r = EntryRecorder::active()) {
    r->on_launch(shared_from_this(), tensors, scalars, dyn, device, stream != nullptr || event_log_ != nullptr);
  }
  ArgValue values[kMaxArgs];
  void* argv[kMaxArgs];
  size_t n = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].is_tensor) values[n].ptr = tensors[i].ptr;
    else values[n] = scalars[i];
    argv[n] = &values[n];
    ++n;
  }
  for (int v = 0; v < num_dynamic_; ++v) {
    values[n].i64 = dyn[v];  // an int32 parameter reads the low half (check_tensor bounded it)
    argv[n] = &values[n];
    ++n;
  }
  // Switching devices costs two runtime calls; most launches are on the current one.
  std::optional<c10::cuda::CUDAGuard> guard;
  if (c10::cuda::current_device() != device) guard.emplace(static_cast<c10::DeviceIndex>(device));
  void* s = stream ? stream : static_cast<void*>(c10::cuda::getCurrentCUDAStream(device).stream());
  // Every grid is checked before the first launch, so a bad size launches nothing.
  c10::SmallVector<runtime::Dim3, 4> grids(kernels_.size());
  c10::SmallVector<bool, 4> skip(kernels_.size(), false);
  // The values a grid extent may name, gathered once for all the kernels that need them.
  ir::VarValues vars;
  bool have_vars = false;
  auto gather_vars = [&] {
    if (have_vars) return;
    for (int v = 0; v < num_dynamic_; ++v) vars[dynamic_vars_[v].get()] = dyn[v];
    for (size_t i = 0; i < params_.size(); ++i) {
      const ParamSpec& p = params_[i];
      if (!p.is_tensor && !p.dtype.is_float()) vars[p.var.get()] = scalars[i].i64;
    }
    have_vars = true;
  };
  for (size_t ki = 0; ki < kernels_.size(); ++ki) {
    Kernel& k = kernels_[ki];
    if (!k.launch.checks.empty()) {
      // A RuntimeError, as TileLang's host check of an assumption raises.
      gather_vars();
      std::string failed = ir::failed_assumption(k.launch.checks, vars, kernel_name_);
      if (!failed.empty()) throw AssumptionError(failed);
    }
    int64_t ext[3] = {1, 1, 1};
    if (!k.const_grid.empty()) {
      for (size_t d = 0; d < k.const_grid.size(); ++d) ext[d] = k.const_grid[d];
    } else {
      gather_vars();
      for (size_t d = 0; d < k.launch.grid.size(); ++d) {
        internal_assert(ir::eval_int(k.launch.grid[d], vars, &ext[d])) << "grid extent " << d << " cannot be evaluated";
      }
    }
    for (size_t d = 0; d < k.launch.grid.size(); ++d) skip[ki] = skip[ki] || ext[d] <= 0;  // an empty tensor
    if (skip[ki]) continue;
    check_clusters(k, ext, dyn);
    grids[ki] = launch_grid(k, ext, dyn);
    if (k.launch.cooperative) check_cooperative(k, loaded_for(k, device), grids[ki], dyn);
  }
  for (size_t ki = 0; ki < kernels_.size(); ++ki) {
    if (skip[ki]) continue;
    Kernel& k = kernels_[ki];
    const Loaded& l = loaded_for(k, device);
    const runtime::Dim3 block{unsigned(k.launch.threads), 1, 1};
    if (k.launch.tensor_maps.empty() && !k.launch.event_log) {
      l.fn.launch(grids[ki], block, k.launch.smem_bytes, s, argv, k.launch.cooperative);
      continue;
    }
    // The tensor maps follow the shared arguments, each by the address of its 128 bytes;
    // then the event log, when the kernel records events.
    constexpr size_t kMaxMaps = 8;
    internal_assert(k.launch.tensor_maps.size() <= kMaxMaps && n + kMaxMaps + 1 <= size_t(kMaxArgs)) << "too many tensor maps";
    alignas(64) unsigned char maps[kMaxMaps][128];
    if (!k.launch.tensor_maps.empty()) encode_maps(k, tensors, maps);
    void* kargv[kMaxArgs];
    for (size_t i = 0; i < n; ++i) kargv[i] = argv[i];
    size_t m = n;
    for (size_t i = 0; i < k.launch.tensor_maps.size(); ++i) kargv[m++] = maps[i];
    void* log = event_log_;
    if (k.launch.event_log) kargv[m++] = &log;
    l.fn.launch(grids[ki], block, k.launch.smem_bytes, s, kargv, k.launch.cooperative);
  }
}

// Each tensor map of kernel k for this call's tensors: from the cache when the tensor's
// address and sizes were seen lately, else encoded (and cached).
void Program::encode_maps(Kernel& k, const TensorDesc* tensors, unsigned char (*out)[128]) {
  std::lock_guard<std::mutex> lock(mu_);
  if (k.map_cache.size() != k.launch.tensor_maps.size()) k.map_cache.resize(k.launch.tensor_maps.size());
  for (size_t i = 0; i < k.launch.tensor_maps.size(); ++i) {
    const TensorMapSpec& spec = k.launch.tensor_maps[i];
    const TensorDesc& t = tensors[spec.param];
    int rank = t.rank;
    const void* ptr = t.ptr;
    MapCache& cache = k.map_cache[i];
    MapCacheEntry* hit = nullptr;
    for (auto& e : cache.entries) {
      if (e.ptr != ptr) continue;
      bool same = true;
      for (int d = 0; d < rank; ++d) same = same && e.dims[d] == t.sizes[d];
      if (same) {
        hit = &e;
        break;
      }
    }
    if (!hit) {
      hit = &cache.entries[cache.next];
      cache.next = (cache.next + 1) % 4;
      uint64_t dims[5], strides[5];
      uint32_t box[5], ones[5];
      for (int d = 0; d < rank; ++d) {
        int src = rank - 1 - d;  // innermost first
        dims[d] = uint64_t(std::max<int64_t>(t.sizes[src], 1));
        strides[d] = uint64_t(t.strides[src]) * spec.elem_bytes;
        box[d] = spec.box[d];
        ones[d] = 1;
        hit->dims[src] = t.sizes[src];
      }
      hit->ptr = nullptr;
      runtime::encode_tensor_map(hit->map, spec.dtype, rank, const_cast<void*>(ptr), dims, strides + 1, box, ones,
                                 spec.swizzle, params_[spec.param].name);
      hit->ptr = ptr;
    }
    std::memcpy(out[i], hit->map, 128);
  }
}

}  // namespace tegula::bindings
