#include "runtime/driver.h"

#include <memory>
#include <mutex>
#include <utility>

#include "runtime/dynlib.h"
#include "support/error.h"

namespace tegula::runtime {
namespace {

// The few cuda.h types and values we need, declared here so the core builds without driver headers.
using CUresult = int;
using CUdevice = int;
using CUcontext = struct CUctx_opaque*;
using CUmodule = struct CUmod_opaque*;
using CUfunction = struct CUfunc_opaque*;
using CUstream = struct CUstream_opaque*;
constexpr CUresult kSuccess = 0;
constexpr CUresult kErrorNoBinaryForGpu = 209;
constexpr int kAttrMultiprocessorCount = 16;
constexpr int kAttrComputeCapabilityMajor = 75;
constexpr int kAttrComputeCapabilityMinor = 76;
constexpr int kAttrMaxSharedMemoryPerBlockOptin = 97;
constexpr int kFuncAttrMaxDynamicSharedSizeBytes = 8;
constexpr int kDefaultDynamicSmemCap = 48 * 1024;

// Symbol names are those cuda.h maps each call to in CUDA 12/13 (cuDevicePrimaryCtxRelease is the
// only one here with a _v2); the per-thread-stream (_ptsz) launch is not used: the caller names
// the stream.
struct DriverApi {
  DynLib lib;
  CUresult (*Init)(unsigned);
  CUresult (*DriverGetVersion)(int*);
  CUresult (*GetErrorName)(CUresult, const char**);
  CUresult (*GetErrorString)(CUresult, const char**);
  CUresult (*DeviceGetCount)(int*);
  CUresult (*DeviceGet)(CUdevice*, int);
  CUresult (*DeviceGetName)(char*, int, CUdevice);
  CUresult (*DeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*CtxGetCurrent)(CUcontext*);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*ModuleLoadData)(CUmodule*, const void*);
  CUresult (*ModuleUnload)(CUmodule);
  CUresult (*ModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*FuncSetAttribute)(CUfunction, int, int);
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                           void**, void**);
  CUresult (*LaunchCooperativeKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                      CUstream, void**);
  CUresult (*OccupancyMaxActiveBlocksPerMultiprocessor)(int*, CUfunction, int, size_t);
  // CUDA 12+; null on an older driver (bulk tensor copies then cannot launch).
  CUresult (*TensorMapEncodeTiled)(void*, int, unsigned, void*, const uint64_t*, const uint64_t*, const uint32_t*,
                                   const uint32_t*, int, int, int, int) = nullptr;
};

struct DriverState {
  std::unique_ptr<DriverApi> api;  // null when the driver is unusable
  std::string error;               // why, when it is
};

std::string describe(const DriverApi& api, CUresult rc) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.GetErrorName(rc, &name) != kSuccess || !name) name = "CUDA_ERROR_UNKNOWN";
  if (api.GetErrorString(rc, &text) != kSuccess || !text) text = "unrecognised error code";
  return std::string(name) + " (" + std::to_string(rc) + "): " + text;
}

DriverState load_driver() {
  DriverState state;
  try {
    auto api = std::make_unique<DriverApi>();
    // Never the toolkit's stubs/libcuda.so: it loads, then fails every call.
    api->lib = DynLib::open({"libcuda.so.1", "libcuda.so"}, "the CUDA driver (libcuda.so.1)");
    const DynLib& lib = api->lib;
    lib.bind(api->Init, "cuInit");
    lib.bind(api->DriverGetVersion, "cuDriverGetVersion");
    lib.bind(api->GetErrorName, "cuGetErrorName");
    lib.bind(api->GetErrorString, "cuGetErrorString");
    lib.bind(api->DeviceGetCount, "cuDeviceGetCount");
    lib.bind(api->DeviceGet, "cuDeviceGet");
    lib.bind(api->DeviceGetName, "cuDeviceGetName");
    lib.bind(api->DeviceGetAttribute, "cuDeviceGetAttribute");
    lib.bind(api->DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    lib.bind(api->CtxGetCurrent, "cuCtxGetCurrent");
    lib.bind(api->CtxSetCurrent, "cuCtxSetCurrent");
    lib.bind(api->ModuleLoadData, "cuModuleLoadData");
    lib.bind(api->ModuleUnload, "cuModuleUnload");
    lib.bind(api->ModuleGetFunction, "cuModuleGetFunction");
    lib.bind(api->FuncSetAttribute, "cuFuncSetAttribute");
    lib.bind(api->LaunchKernel, "cuLaunchKernel");
    lib.bind(api->LaunchCooperativeKernel, "cuLaunchCooperativeKernel");
    lib.bind(api->OccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
    api->TensorMapEncodeTiled = reinterpret_cast<decltype(api->TensorMapEncodeTiled)>(lib.find("cuTensorMapEncodeTiled"));
    CUresult rc = api->Init(0);
    if (rc != kSuccess) throw CudaError("cuInit failed: " + describe(*api, rc));
    state.api = std::move(api);
  } catch (const CudaError& e) {
    state.error = e.what();
  }
  return state;
}

const DriverState& state() {
  static const DriverState* loaded = new DriverState(load_driver());  // kept past exit for late unloads
  return *loaded;
}

const DriverApi& driver() {
  const DriverState& s = state();
  if (!s.api) throw CudaError(s.error);
  return *s.api;
}

[[noreturn]] __attribute__((noinline, cold)) void throw_error(CUresult rc, const char* call, const std::string& what) {
  const DriverApi& api = driver();
  std::string msg = std::string(call) + " failed";
  if (!what.empty()) msg += " for " + what;
  msg += ": " + describe(api, rc);
  if (rc == kErrorNoBinaryForGpu) msg += " (the image was built for another architecture than this device's)";
  throw CudaError(msg);
}

inline void check(CUresult rc, const char* call) {
  if (rc != kSuccess) throw_error(rc, call, "");
}

CUdevice get_device(int ordinal) {
  CUdevice dev = 0;
  CUresult rc = driver().DeviceGet(&dev, ordinal);
  if (rc != kSuccess) throw_error(rc, "cuDeviceGet", "device " + std::to_string(ordinal));
  return dev;
}

int attribute(int device, int attr, const char* what) {
  int value = 0;
  CUresult rc = driver().DeviceGetAttribute(&value, attr, get_device(device));
  if (rc != kSuccess)
    throw_error(rc, "cuDeviceGetAttribute", std::string(what) + " of device " + std::to_string(device));
  return value;
}

// Retained once per device and never released, as torch does: the context outlives every module.
CUcontext primary_context(int device) {
  static std::mutex mutex;
  static std::vector<CUcontext> retained;
  std::lock_guard<std::mutex> lock(mutex);
  if (device < 0) throw CudaError("invalid device ordinal " + std::to_string(device));
  if (retained.size() <= static_cast<size_t>(device)) retained.resize(device + 1, nullptr);
  if (!retained[device])
    check(driver().DevicePrimaryCtxRetain(&retained[device], get_device(device)), "cuDevicePrimaryCtxRetain");
  return retained[device];
}

}  // namespace

bool driver_available() {
  try {
    return device_count() > 0;
  } catch (...) {
    return false;
  }
}

int driver_version() {
  int version = 0;
  check(driver().DriverGetVersion(&version), "cuDriverGetVersion");
  return version;
}

int device_count() {
  int count = 0;
  check(driver().DeviceGetCount(&count), "cuDeviceGetCount");
  return count;
}

std::string device_name(int device) {
  char name[256] = {};
  check(driver().DeviceGetName(name, sizeof(name) - 1, get_device(device)), "cuDeviceGetName");
  return name;
}

int device_compute_capability(int device) {
  return attribute(device, kAttrComputeCapabilityMajor, "compute capability") * 10 +
         attribute(device, kAttrComputeCapabilityMinor, "compute capability");
}

std::string device_arch(int device) {
  int cc = device_compute_capability(device);
  std::string arch = "sm_" + std::to_string(cc);
  return (cc == 90 || cc == 100) ? arch + "a" : arch;
}

int device_sm_count(int device) { return attribute(device, kAttrMultiprocessorCount, "SM count"); }

int device_max_smem_optin(int device) {
  return attribute(device, kAttrMaxSharedMemoryPerBlockOptin, "opt-in shared memory size");
}

void Function::set_max_dynamic_smem(int bytes) const {
  CUresult rc = driver().FuncSetAttribute(static_cast<CUfunction>(handle_), kFuncAttrMaxDynamicSharedSizeBytes, bytes);
  if (rc != kSuccess) throw_error(rc, "cuFuncSetAttribute", "MAX_DYNAMIC_SHARED_SIZE_BYTES=" + std::to_string(bytes));
}

void Function::launch(Dim3 grid, Dim3 block, int smem_bytes, void* stream, void** args, bool cooperative) const {
  const char* call = cooperative ? "cuLaunchCooperativeKernel" : "cuLaunchKernel";
  if (!handle_) throw CudaError(std::string(call) + ": launching an empty Function");
  // A non-empty Function exists only once the driver loaded, so state().api is set.
  const DriverApi& api = *state().api;
  auto fn = static_cast<CUfunction>(handle_);
  auto st = static_cast<CUstream>(stream);
  CUresult rc = cooperative ? api.LaunchCooperativeKernel(fn, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                                          static_cast<unsigned>(smem_bytes), st, args)
                            : api.LaunchKernel(fn, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                               static_cast<unsigned>(smem_bytes), st, args, nullptr);
  if (rc != kSuccess) {
    throw_error(rc, call,
                "grid (" + std::to_string(grid.x) + "," + std::to_string(grid.y) + "," + std::to_string(grid.z) +
                    ") block (" + std::to_string(block.x) + "," + std::to_string(block.y) + "," +
                    std::to_string(block.z) + ") smem " + std::to_string(smem_bytes));
  }
}

int Function::max_active_blocks_per_sm(int threads, int smem_bytes) const {
  int blocks = 0;
  CUresult rc = driver().OccupancyMaxActiveBlocksPerMultiprocessor(&blocks, static_cast<CUfunction>(handle_), threads,
                                                                     static_cast<size_t>(smem_bytes));
  if (rc != kSuccess) {
    throw_error(rc, "cuOccupancyMaxActiveBlocksPerMultiprocessor",
                std::to_string(threads) + " threads, smem " + std::to_string(smem_bytes));
  }
  return blocks;
}

void encode_tensor_map(void* out, int dtype, int rank, void* addr, const uint64_t* dims, const uint64_t* strides,
                       const uint32_t* box, const uint32_t* element_strides, int swizzle, const std::string& what) {
  const DriverApi& api = driver();
  if (!api.TensorMapEncodeTiled) {
    throw CudaError("cuTensorMapEncodeTiled is missing from this CUDA driver (it needs CUDA 12 or newer); compile the "
                    "kernel with pass_configs {'tl.disable_tma_lower': True}");
  }
  constexpr int kL2Promotion256 = 3;
  CUresult rc = api.TensorMapEncodeTiled(out, dtype, unsigned(rank), addr, dims, strides, box, element_strides,
                                         /*interleave=*/0, swizzle, kL2Promotion256, /*oob_fill=*/0);
  if (rc != kSuccess) {
    std::string shape;
    for (int d = rank - 1; d >= 0; --d) shape += std::to_string(dims[d]) + (d ? ", " : "");
    throw_error(rc, "cuTensorMapEncodeTiled", "tensor '" + what + "' of shape (" + shape + ")");
  }
}

Module::Module(const void* image, int device) {
  const DriverApi& api = driver();
  if (!image) throw CudaError("cuModuleLoadData: empty image");
  CUcontext ctx = nullptr;
  check(api.CtxGetCurrent(&ctx), "cuCtxGetCurrent");
  if (!ctx) {
    ctx = primary_context(device);
    check(api.CtxSetCurrent(ctx), "cuCtxSetCurrent");
  }
  CUmodule mod = nullptr;
  check(api.ModuleLoadData(&mod, image), "cuModuleLoadData");
  module_ = mod;
  context_ = ctx;
}

Module::Module(const std::vector<char>& image, int device) : Module(image.empty() ? nullptr : image.data(), device) {}

Module::Module(Module&& other) noexcept
    : module_(std::exchange(other.module_, nullptr)), context_(std::exchange(other.context_, nullptr)) {}

Module& Module::operator=(Module&& other) noexcept {
  if (this != &other) {
    reset();
    module_ = std::exchange(other.module_, nullptr);
    context_ = std::exchange(other.context_, nullptr);
  }
  return *this;
}

Module::~Module() { reset(); }

void Module::reset() noexcept {
  if (!module_) return;
  const DriverApi& api = *state().api;
  // cuModuleUnload acts on the current context; errors are dropped (at exit the driver may be gone).
  CUcontext current = nullptr;
  bool switched = api.CtxGetCurrent(&current) == kSuccess && current != context_ &&
                  api.CtxSetCurrent(static_cast<CUcontext>(context_)) == kSuccess;
  api.ModuleUnload(static_cast<CUmodule>(module_));
  if (switched) api.CtxSetCurrent(current);
  module_ = nullptr;
  context_ = nullptr;
}

Function Module::function(const std::string& name, int dynamic_smem_bytes) const {
  CUfunction fn = nullptr;
  CUresult rc = driver().ModuleGetFunction(&fn, static_cast<CUmodule>(module_), name.c_str());
  if (rc != kSuccess) throw_error(rc, "cuModuleGetFunction", "'" + name + "'");
  Function f(fn);
  if (dynamic_smem_bytes > kDefaultDynamicSmemCap) f.set_max_dynamic_smem(dynamic_smem_bytes);
  return f;
}

}  // namespace tegula::runtime
