// Atomic accumulation into global or shared memory, for T.atomic_add and for split-K
// style reductions. Each returns the value the location held before the add.
//
// Most map to one ATOM/RED instruction. bfloat16_t has one from sm_90 only; on sm_80
// the toolkit's atomicAdd falls back to a compare-and-swap loop (correct, slower under
// contention). Packed float pairs and quads likewise need sm_90.
#pragma once

#include "tegula/config.h"
#include "tegula/vec.h"

namespace tegula {

TEGULA_DEVICE float atomic_add(float* addr, float v) { return atomicAdd(addr, v); }
TEGULA_DEVICE double atomic_add(double* addr, double v) { return atomicAdd(addr, v); }
TEGULA_DEVICE half_t atomic_add(half_t* addr, half_t v) { return atomicAdd(addr, v); }
TEGULA_DEVICE bfloat16_t atomic_add(bfloat16_t* addr, bfloat16_t v) { return atomicAdd(addr, v); }
TEGULA_DEVICE int atomic_add(int* addr, int v) { return atomicAdd(addr, v); }
TEGULA_DEVICE unsigned atomic_add(unsigned* addr, unsigned v) { return atomicAdd(addr, v); }
TEGULA_DEVICE unsigned long long atomic_add(unsigned long long* addr, unsigned long long v) {
  return atomicAdd(addr, v);
}
// Two's-complement addition is the same bit operation signed or unsigned, so the
// signed 64-bit forms go through the unsigned instruction.
TEGULA_DEVICE long long atomic_add(long long* addr, long long v) {
  return static_cast<long long>(atomicAdd(reinterpret_cast<unsigned long long*>(addr),
                                          static_cast<unsigned long long>(v)));
}
TEGULA_DEVICE long atomic_add(long* addr, long v) {
  static_assert(sizeof(long) == 8, "atomic_add(long*) assumes LP64");
  return static_cast<long>(atomicAdd(reinterpret_cast<unsigned long long*>(addr),
                                     static_cast<unsigned long long>(v)));
}

// Two adjacent elements in one instruction; addr must be aligned to 2 * sizeof(T).
// Each lane is atomic on its own, not the pair together.
TEGULA_DEVICE Vec<half_t, 2> atomic_add_x2(half_t* addr, const Vec<half_t, 2>& v) {
  __half2 old = atomicAdd(reinterpret_cast<__half2*>(addr), __halves2half2(v[0], v[1]));
  return Vec<half_t, 2>{{__low2half(old), __high2half(old)}};
}
TEGULA_DEVICE Vec<bfloat16_t, 2> atomic_add_x2(bfloat16_t* addr, const Vec<bfloat16_t, 2>& v) {
  __nv_bfloat162 old =
      atomicAdd(reinterpret_cast<__nv_bfloat162*>(addr), __halves2bfloat162(v[0], v[1]));
  return Vec<bfloat16_t, 2>{{__low2bfloat16(old), __high2bfloat16(old)}};
}

// Packed float atomics exist from sm_90, for global memory only: addr must be global.
// On sm_80 the same call issues one atomic per lane.
TEGULA_DEVICE Vec<float, 2> atomic_add_x2(float* addr, const Vec<float, 2>& v) {
#if TEGULA_ARCH >= 900
  float2 old = atomicAdd(reinterpret_cast<float2*>(addr), make_float2(v[0], v[1]));
  return Vec<float, 2>{{old.x, old.y}};
#else
  return Vec<float, 2>{{atomicAdd(addr, v[0]), atomicAdd(addr + 1, v[1])}};
#endif
}
TEGULA_DEVICE Vec<float, 4> atomic_add_x4(float* addr, const Vec<float, 4>& v) {
#if TEGULA_ARCH >= 900
  float4 old = atomicAdd(reinterpret_cast<float4*>(addr), make_float4(v[0], v[1], v[2], v[3]));
  return Vec<float, 4>{{old.x, old.y, old.z, old.w}};
#else
  return Vec<float, 4>{{atomicAdd(addr, v[0]), atomicAdd(addr + 1, v[1]),
                        atomicAdd(addr + 2, v[2]), atomicAdd(addr + 3, v[3])}};
#endif
}

}  // namespace tegula
