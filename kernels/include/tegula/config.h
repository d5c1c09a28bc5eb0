// Base of the device library: qualifiers, fixed-width integers, the 16-bit float
// aliases and the few type traits the other headers need.
//
// Every header here must build both under nvcc and under NVRTC. NVRTC ships no host
// C++ library (not even <cstdint>), so this file supplies what we would otherwise
// take from it, and nothing includes a host header unless nvcc is the compiler.
#pragma once

#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#define TEGULA_DEVICE __device__ __forceinline__
#define TEGULA_HOST_DEVICE __host__ __device__ __forceinline__
// A function every call site calls instead of inlining: one a kernel may reach from
// hundreds of sites after unrolling (a T.rng_* draw in a T.Parallel loop of 128 slots a
// thread), where inlining each copy makes NVVM and ptxas take minutes.
#define TEGULA_DEVICE_OUTLINED __device__ __noinline__

// The architecture the current pass compiles for. nvcc also runs a host pass over
// kernel bodies (it parses them, never emits them); there everything must be declared,
// so the host pass counts as "every architecture".
#if defined(__CUDA_ARCH__)
#define TEGULA_ARCH __CUDA_ARCH__
#else
#define TEGULA_ARCH 100000
#endif

#if defined(__CUDACC_RTC__)
// The LP64 spellings glibc uses, so a kernel that is also built by nvcc names the same
// types (int64_t is `long`, not `long long`, and overloads must agree on it).
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long uint64_t;
#else
#include <cstdint>
#endif

namespace tegula {

using half_t = __half;
using bfloat16_t = __nv_bfloat16;
// 8-bit floats (T.float8_e4m3fn, T.float8_e5m2): storage types, converted through cast.
using fp8_e4m3_t = __nv_fp8_e4m3;
using fp8_e5m2_t = __nv_fp8_e5m2;

namespace detail {

template <typename A, typename B>
struct SameType { static constexpr bool value = false; };
template <typename A>
struct SameType<A, A> { static constexpr bool value = true; };
template <typename A, typename B>
inline constexpr bool is_same = SameType<A, B>::value;

template <typename T> struct Integral { static constexpr bool value = false; };
#define TEGULA_INTEGRAL(T) \
  template <> struct Integral<T> { static constexpr bool value = true; };
TEGULA_INTEGRAL(bool)
TEGULA_INTEGRAL(char)
TEGULA_INTEGRAL(signed char)
TEGULA_INTEGRAL(unsigned char)
TEGULA_INTEGRAL(short)
TEGULA_INTEGRAL(unsigned short)
TEGULA_INTEGRAL(int)
TEGULA_INTEGRAL(unsigned int)
TEGULA_INTEGRAL(long)
TEGULA_INTEGRAL(unsigned long)
TEGULA_INTEGRAL(long long)
TEGULA_INTEGRAL(unsigned long long)
#undef TEGULA_INTEGRAL

// Integers other than bool: the types that take the integer paths of cast, max, abs.
template <typename T>
inline constexpr bool is_integer = Integral<T>::value && !is_same<T, bool>;
template <typename T>
inline constexpr bool is_signed_integer = is_integer<T> && (T(-1) < T(0));
template <typename T>
inline constexpr bool is_16bit_float = is_same<T, half_t> || is_same<T, bfloat16_t>;
template <typename T>
inline constexpr bool is_8bit_float = is_same<T, fp8_e4m3_t> || is_same<T, fp8_e5m2_t>;
template <typename T>
inline constexpr bool is_float = is_16bit_float<T> || is_8bit_float<T> || is_same<T, float> || is_same<T, double>;

// static_assert(always_false<T>) fires only when the template is instantiated.
template <typename T>
inline constexpr bool always_false = false;

template <bool kCond, typename T = void> struct EnableIf {};
template <typename T> struct EnableIf<true, T> { using type = T; };
template <bool kCond, typename T = void>
using enable_if_t = typename EnableIf<kCond, T>::type;

// Largest integer of the type; for int8_t: 127, for uint16_t: 65535.
template <typename T>
TEGULA_HOST_DEVICE constexpr T integer_max() {
  if constexpr (is_signed_integer<T>) {
    return T((1ull << (sizeof(T) * 8 - 1)) - 1);
  } else {
    return T(~T(0));
  }
}
template <typename T>
TEGULA_HOST_DEVICE constexpr T integer_min() {
  if constexpr (is_signed_integer<T>) {
    return T(-integer_max<T>() - 1);
  } else {
    return T(0);
  }
}

}  // namespace detail

// The 32-bit shared-window address that ldmatrix, cp.async and mbarrier operands take,
// from an ordinary (generic) pointer into shared memory.
TEGULA_DEVICE uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

}  // namespace tegula
