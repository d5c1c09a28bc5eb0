// The intrinsics a thread calls by name that CUDA has no function for (TileLang's
// T.warp_reduce_*, T.shfl_*), the programmatic-dependent-launch functions NVRTC lacks, and
// the NaN-ignoring max and min of T.reduce_max(..., nan_propagate=False). Warp votes and
// matches (T.any_sync, T.ballot, T.match_any_sync, ...) are printed as CUDA's own.
//
// Every warp call here names the full warp (mask 0xffffffff) unless it takes a mask: all
// 32 lanes must reach it, as TileLang's do.
#pragma once

#include "tegula/config.h"
#include "tegula/math.h"
#include "tegula/reduce.h"

namespace tegula {

// IEEE maxNum / minNum: a NaN operand is dropped, the other returned (fmaxf, __hmax).
// max_num(NaN, 1) == 1; max_num(NaN, NaN) is NaN.
template <typename T>
TEGULA_DEVICE T max_num(T a, T b) {
  if constexpr (detail::is_same<T, float>) {
    return ::fmaxf(a, b);
  } else if constexpr (detail::is_same<T, double>) {
    return ::fmax(a, b);
  } else if constexpr (detail::is_16bit_float<T>) {
    return __hmax(a, b);
  } else {
    return a < b ? b : a;
  }
}
template <typename T>
TEGULA_DEVICE T min_num(T a, T b) {
  if constexpr (detail::is_same<T, float>) {
    return ::fminf(a, b);
  } else if constexpr (detail::is_same<T, double>) {
    return ::fmin(a, b);
  } else if constexpr (detail::is_16bit_float<T>) {
    return __hmin(a, b);
  } else {
    return b < a ? b : a;
  }
}

// The value of every lane of the warp combined, in every lane: a butterfly over lane
// distances 16, 8, 4, 2, 1 (the order the simulator reproduces, interp/simt_calls.cc).
// max and min propagate NaN, as T.max does.
#define TEGULA_WARP_REDUCE(name, expr)                       \
  template <typename T>                                      \
  TEGULA_DEVICE T name(T v) {                                \
    _Pragma("unroll") for (int d = 16; d > 0; d >>= 1) {     \
      T o = shfl_xor(v, d);                                  \
      v = expr;                                              \
    }                                                        \
    return v;                                                \
  }
TEGULA_WARP_REDUCE(warp_reduce_sum, add(v, o))
TEGULA_WARP_REDUCE(warp_reduce_max, max(v, o))
TEGULA_WARP_REDUCE(warp_reduce_min, min(v, o))
TEGULA_WARP_REDUCE(warp_reduce_bitand, T(v & o))
TEGULA_WARP_REDUCE(warp_reduce_bitor, T(v | o))
#undef TEGULA_WARP_REDUCE

// TileLang's T.shfl_sync / shfl_up / shfl_down / shfl_xor: value from another lane of
// this one's group of `width` lanes (a power of two up to 32), any trivially copyable T as
// 32-bit words; an up / down / xor partner outside the group gives the lane its own value.
#define TEGULA_WARP_SHUFFLE(name, cuda)                                     \
  template <typename T>                                                     \
  TEGULA_DEVICE T name(unsigned mask, T v, int lane, int width) {           \
    constexpr int kWords = (sizeof(T) + 3) / 4;                             \
    unsigned words[kWords] = {};                                            \
    memcpy(words, &v, sizeof(T));                                           \
    _Pragma("unroll") for (int i = 0; i < kWords; ++i) words[i] = cuda(mask, words[i], lane, width); \
    memcpy(&v, words, sizeof(T));                                           \
    return v;                                                               \
  }
TEGULA_WARP_SHUFFLE(shfl_idx, __shfl_sync)
TEGULA_WARP_SHUFFLE(shfl_up, __shfl_up_sync)
TEGULA_WARP_SHUFFLE(shfl_down, __shfl_down_sync)
TEGULA_WARP_SHUFFLE(shfl_bfly, __shfl_xor_sync)
#undef TEGULA_WARP_SHUFFLE

TEGULA_DEVICE void sync_warp(unsigned mask) { __syncwarp(mask); }

}  // namespace tegula

// Programmatic dependent launch (sm_90+), under the CUDA runtime's names, which the
// generated code calls: cudaTriggerProgrammaticLaunchCompletion lets the next kernel on the
// stream start its prologue, cudaGridDependencySynchronize waits for the previous kernel's
// results. nvcc declares both (cuda_device_runtime_api.h); NVRTC does not, so they are
// defined here for it. Where the launch did not ask for programmatic serialisation both
// are no-ops; before sm_90 they are left out.
#if defined(__CUDACC_RTC__) && !defined(__CUDA_DEVICE_RUNTIME_API_H__)
static __device__ __forceinline__ void cudaTriggerProgrammaticLaunchCompletion() {
#if TEGULA_ARCH >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
static __device__ __forceinline__ void cudaGridDependencySynchronize() {
#if TEGULA_ARCH >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
#endif
