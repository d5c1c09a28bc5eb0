// The CUDA Driver API, from libcuda.so.1 opened with dlopen on first use (never linked), so the core
// loads on machines without a driver. Every failure throws CudaError naming the call, the driver's
// error name and its description.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tegula::runtime {

// True when libcuda loads, cuInit succeeds and at least one device is visible. Never throws.
bool driver_available();
// The driver's CUDA version, e.g. 13000.
int driver_version();
int device_count();
std::string device_name(int device);
// major * 10 + minor: 90 on H100.
int device_compute_capability(int device);
// The NVRTC target for the device: "sm_90a" and "sm_100a" (their wgmma / tcgen05 features need the
// arch-specific target), otherwise "sm_XY".
std::string device_arch(int device);
int device_sm_count(int device);
// Largest dynamic shared memory a block may opt into (227 KB on sm_90).
int device_max_smem_optin(int device);

// cuTensorMapEncodeTiled into out (128 bytes, 64-byte aligned): a tiled tensor map of
// `rank` dimensions, innermost first (strides: of dimensions 1..rank-1, in bytes), no
// interleave, zero fill out of bounds, 256-byte L2 promotion. `what` names the tensor in
// the error when the driver refuses.
void encode_tensor_map(void* out, int dtype, int rank, void* addr, const uint64_t* dims, const uint64_t* strides,
                       const uint32_t* box, const uint32_t* element_strides, int swizzle, const std::string& what);

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// A kernel entry point; a plain handle, valid while its Module lives.
class Function {
 public:
  Function() = default;
  bool valid() const { return handle_ != nullptr; }
  void* handle() const { return handle_; }
  // Lifts the 48 KB default cap on dynamic shared memory.
  void set_max_dynamic_smem(int bytes) const;
  // args: one pointer per kernel parameter, to that parameter's value. stream: a CUstream (0 =
  // the legacy default stream). Allocates nothing and builds no strings unless the launch fails.
  // cooperative: cuLaunchCooperativeKernel, which guarantees every block is resident at once
  // (a grid barrier needs it) and fails when they cannot be.
  void launch(Dim3 grid, Dim3 block, int smem_bytes, void* stream, void** args, bool cooperative = false) const;
  // How many blocks of `threads` threads and `smem_bytes` of dynamic shared memory one SM
  // holds at once (cuOccupancyMaxActiveBlocksPerMultiprocessor).
  int max_active_blocks_per_sm(int threads, int smem_bytes) const;

 private:
  friend class Module;
  explicit Function(void* handle) : handle_(handle) {}
  void* handle_ = nullptr;
};

// A cubin (or NUL-terminated PTX) loaded into a context: the current one, or when none is current
// the device's primary context, retained and made current (the context torch uses).
class Module {
 public:
  Module(const void* image, int device);
  explicit Module(const std::vector<char>& image, int device = 0);
  Module(Module&& other) noexcept;
  Module& operator=(Module&& other) noexcept;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  ~Module();

  // The entry `name`; raises its dynamic shared memory limit here, once, when above 48 KB.
  Function function(const std::string& name, int dynamic_smem_bytes = 0) const;
  void* handle() const { return module_; }
  void* context() const { return context_; }

 private:
  void reset() noexcept;
  void* module_ = nullptr;
  void* context_ = nullptr;
};

}  // namespace tegula::runtime
