// Conversions between the element types of the tile IR: float, double, half_t,
// bfloat16_t, the 8-bit floats, bool and the integers. Every T.cast and every mixed-type expression of
// the generated code goes through cast<To>(x), so each pair rounds exactly once.
#pragma once

#include "tegula/config.h"
#include "tegula/small_types.h"

namespace tegula {

TEGULA_DEVICE float to_float(float x) { return x; }
TEGULA_DEVICE float to_float(half_t x) { return __half2float(x); }
TEGULA_DEVICE float to_float(bfloat16_t x) { return __bfloat162float(x); }
TEGULA_DEVICE float to_float(fp8_e4m3_t x) { return static_cast<float>(x); }
TEGULA_DEVICE float to_float(fp8_e5m2_t x) { return static_cast<float>(x); }

namespace detail {

template <typename From>
TEGULA_DEVICE half_t to_half(From x) {
  if constexpr (is_same<From, float>) {
    return __float2half_rn(x);
  } else if constexpr (is_same<From, double>) {
    return __double2half(x);  // one rounding; through float would round twice
  } else if constexpr (is_same<From, bfloat16_t>) {
    return __float2half_rn(__bfloat162float(x));  // bf16 -> float is exact
  } else if constexpr (is_same<From, bool>) {
    return __ushort_as_half(x ? 0x3c00 : 0);
  } else if constexpr (is_signed_integer<From>) {
    if constexpr (sizeof(From) <= 4) return __int2half_rn(static_cast<int>(x));
    else return __ll2half_rn(static_cast<long long>(x));
  } else if constexpr (is_integer<From>) {
    if constexpr (sizeof(From) <= 4) return __uint2half_rn(static_cast<unsigned>(x));
    else return __ull2half_rn(static_cast<unsigned long long>(x));
  } else {
    static_assert(always_false<From>, "cast<half_t>: unsupported source type");
  }
}

// Integers convert directly, not through float: (1 << 24) + (1 << 16) + 1 rounds to
// 2^24 + 2^16 in float, a tie that bf16 then breaks downwards to 2^24, whereas the
// correctly rounded bf16 is 2^24 + 2^17.
template <typename From>
TEGULA_DEVICE bfloat16_t to_bf16(From x) {
  if constexpr (is_same<From, float>) {
    return __float2bfloat16_rn(x);
  } else if constexpr (is_same<From, double>) {
    return __double2bfloat16(x);
  } else if constexpr (is_same<From, half_t>) {
    return __float2bfloat16_rn(__half2float(x));
  } else if constexpr (is_same<From, bool>) {
    return __ushort_as_bfloat16(x ? 0x3f80 : 0);
  } else if constexpr (is_signed_integer<From>) {
    if constexpr (sizeof(From) <= 4) return __int2bfloat16_rn(static_cast<int>(x));
    else return __ll2bfloat16_rn(static_cast<long long>(x));
  } else if constexpr (is_integer<From>) {
    if constexpr (sizeof(From) <= 4) return __uint2bfloat16_rn(static_cast<unsigned>(x));
    else return __ull2bfloat16_rn(static_cast<unsigned long long>(x));
  } else {
    static_assert(always_false<From>, "cast<bfloat16_t>: unsupported source type");
  }
}

// The float result of a 16-bit computation, rounded back to T once.
template <typename T>
TEGULA_DEVICE T from_float(float x) {
  if constexpr (is_same<T, half_t>) {
    return __float2half_rn(x);
  } else {
    static_assert(is_same<T, bfloat16_t>, "from_float: T is half_t or bfloat16_t");
    return __float2bfloat16_rn(x);
  }
}

}  // namespace detail

// Conversion with C++ meaning among float, double, half_t, bfloat16_t, bool and the
// integers: floats round to nearest even, float -> integer truncates toward zero,
// anything -> bool is `x != 0`. A 16-bit source widens to float first, which is exact.
template <typename To, typename From>
TEGULA_DEVICE To cast(From x) {
  if constexpr (detail::is_same<To, From>) {
    return x;
  } else if constexpr (detail::is_minifloat<To>) {
    // fp8_e8m0_t, fp4_e2m1_t: through float32 (small_types.h gives their rounding).
    if constexpr (detail::is_int4<From>) return To::from_float(float(x.value));
    else return To::from_float(cast<float>(x));
  } else if constexpr (detail::is_int4<To>) {
    if constexpr (detail::is_integer<From> || detail::is_same<From, bool>) return To::wrap(static_cast<long long>(x));
    else if constexpr (detail::is_int4<From>) return To::wrap(x.value);
    else return To::from_float(cast<float>(x));
  } else if constexpr (detail::is_minifloat<From>) {
    return cast<To>(x.to_float());  // exact
  } else if constexpr (detail::is_int4<From>) {
    return cast<To>(int(x.value));
  } else if constexpr (detail::is_8bit_float<To>) {
    // One rounding, to nearest even, saturating to the largest finite value (CUDA's
    // __NV_SATFINITE constructors); a 16-bit or 8-bit source widens to float exactly.
    if constexpr (detail::is_16bit_float<From> || detail::is_8bit_float<From>) return To(to_float(x));
    else if constexpr (detail::is_same<From, bool>) return To(x ? 1.0f : 0.0f);
    else return To(static_cast<double>(x));
  } else if constexpr (detail::is_8bit_float<From>) {
    return cast<To>(to_float(x));  // exact
  } else if constexpr (detail::is_same<To, half_t>) {
    return detail::to_half(x);
  } else if constexpr (detail::is_same<To, bfloat16_t>) {
    return detail::to_bf16(x);
  } else if constexpr (detail::is_16bit_float<From>) {
    return static_cast<To>(to_float(x));
  } else {
    return static_cast<To>(x);
  }
}

}  // namespace tegula
