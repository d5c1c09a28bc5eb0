// Atomic accumulation into global or shared memory, for T.atomic_add and for split-K
// style reductions. Each returns the value the location held before the add.
//
// atomic_add(addr, v) is relaxed at gpu scope (what atomicAdd issues);
// atomic_add<memory_order_release>(addr, v) and the other orders of
// T.atomic_add(..., memory_order=...) issue `atom.<sem>.gpu.add`, seq_cst as `fence.sc.gpu`
// then an acquire add (the mapping libcu++'s cuda::atomic_ref uses).
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


// The memory orders, numbered as TileLang (and std::memory_order) number them.
enum MemoryOrder : int {
  memory_order_relaxed = 0,
  memory_order_consume = 1,
  memory_order_acquire = 2,
  memory_order_release = 3,
  memory_order_acq_rel = 4,
  memory_order_seq_cst = 5,
};

namespace detail {

template <typename T>
struct NotDeduced { using type = T; };

// One `atom.<SEM>.gpu.add` per type, on a generic address (global or shared memory).
// bfloat16 has the instruction from sm_90 only; before, fences around a relaxed add give
// the same ordering (a release fence then the add; the add then an acquire fence).
template <int Order>
TEGULA_DEVICE bfloat16_t fenced_atom_add(bfloat16_t* a, bfloat16_t v) {
  if constexpr (Order == memory_order_release || Order == memory_order_acq_rel) {
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
  }
  bfloat16_t old = atomicAdd(a, v);
  if constexpr (Order == memory_order_acquire || Order == memory_order_acq_rel) {
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
  }
  return old;
}

#if TEGULA_ARCH >= 900
#define TEGULA_ATOM_ADD_BF16(SEM)                                                                         \
  TEGULA_DEVICE bfloat16_t atom_add_##SEM(bfloat16_t* a, bfloat16_t v) {                                  \
    unsigned short old;                                                                                   \
    asm volatile("atom." #SEM ".gpu.add.noftz.bf16 %0, [%1], %2;"                                         \
                 : "=h"(old) : "l"(a), "h"(__bfloat16_as_ushort(v)) : "memory");                           \
    return __ushort_as_bfloat16(old);                                                                     \
  }
#else
#define TEGULA_ATOM_ADD_BF16(SEM)                                                                         \
  TEGULA_DEVICE bfloat16_t atom_add_##SEM(bfloat16_t* a, bfloat16_t v) {                                  \
    return fenced_atom_add<memory_order_##SEM>(a, v);                                                     \
  }
#endif

#define TEGULA_ATOM_ADD_AS(SEM, T, PTX, REG)                                                              \
  TEGULA_DEVICE T atom_add_##SEM(T* a, T v) {                                                             \
    T old;                                                                                                \
    asm volatile("atom." #SEM ".gpu.add." PTX " %0, [%1], %2;" : "=" REG(old) : "l"(a), REG(v) : "memory"); \
    return old;                                                                                           \
  }
#define TEGULA_ATOM_ADD(SEM)                                                                              \
  TEGULA_ATOM_ADD_AS(SEM, float, "f32", "f")                                                              \
  TEGULA_ATOM_ADD_AS(SEM, double, "f64", "d")                                                             \
  TEGULA_ATOM_ADD_AS(SEM, int, "s32", "r")                                                                \
  TEGULA_ATOM_ADD_AS(SEM, unsigned, "u32", "r")                                                           \
  TEGULA_ATOM_ADD_AS(SEM, unsigned long long, "u64", "l")                                                 \
  TEGULA_DEVICE long long atom_add_##SEM(long long* a, long long v) {                                     \
    return (long long)atom_add_##SEM(reinterpret_cast<unsigned long long*>(a), (unsigned long long)v);    \
  }                                                                                                       \
  TEGULA_DEVICE long atom_add_##SEM(long* a, long v) {                                                    \
    return (long)atom_add_##SEM(reinterpret_cast<unsigned long long*>(a), (unsigned long long)v);         \
  }                                                                                                       \
  TEGULA_DEVICE half_t atom_add_##SEM(half_t* a, half_t v) {                                              \
    unsigned short old;                                                                                   \
    asm volatile("atom." #SEM ".gpu.add.noftz.f16 %0, [%1], %2;"                                          \
                 : "=h"(old) : "l"(a), "h"(__half_as_ushort(v)) : "memory");                              \
    return __ushort_as_half(old);                                                                         \
  }                                                                                                       \
  TEGULA_ATOM_ADD_BF16(SEM)

TEGULA_ATOM_ADD(relaxed)
TEGULA_ATOM_ADD(acquire)
TEGULA_ATOM_ADD(release)
TEGULA_ATOM_ADD(acq_rel)
#undef TEGULA_ATOM_ADD
#undef TEGULA_ATOM_ADD_AS
#undef TEGULA_ATOM_ADD_BF16

}  // namespace detail

// atomic_add<memory_order_release>(&x, v): the add with that memory order (consume is
// taken as acquire, as C++ takes it).
template <int Order, typename T>
TEGULA_DEVICE T atomic_add(T* addr, typename detail::NotDeduced<T>::type v) {
  static_assert(Order >= memory_order_relaxed && Order <= memory_order_seq_cst, "atomic_add: unknown memory order");
  if constexpr (Order == memory_order_relaxed) {
    return detail::atom_add_relaxed(addr, v);
  } else if constexpr (Order == memory_order_release) {
    return detail::atom_add_release(addr, v);
  } else if constexpr (Order == memory_order_acq_rel) {
    return detail::atom_add_acq_rel(addr, v);
  } else {
    if constexpr (Order == memory_order_seq_cst) asm volatile("fence.sc.gpu;" ::: "memory");
    return detail::atom_add_acquire(addr, v);
  }
}

}  // namespace tegula
