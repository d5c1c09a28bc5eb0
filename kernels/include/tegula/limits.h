// Extreme values of each element type, for fills (T.infinity, T.max_value) and for the
// identities reductions start from.
#pragma once

#include "tegula/config.h"

namespace tegula {

namespace detail {
// An 8-bit float from its bits (__nv_fp8_* keep them in __x).
template <typename T>
TEGULA_DEVICE T fp8_from_bits(unsigned char bits) {
  T out;
  out.__x = bits;
  return out;
}
}  // namespace detail

// +inf / -inf. Integer types have no infinity; they give their largest and smallest
// value, which is what a max or min reduction over integers needs to start from.
// float8_e4m3fn has none either (the frontend refuses T.infinity of it).
template <typename T>
TEGULA_DEVICE T infinity() {
  if constexpr (detail::is_same<T, float>) {
    return __int_as_float(0x7f800000);
  } else if constexpr (detail::is_same<T, double>) {
    return __longlong_as_double(0x7ff0000000000000ll);
  } else if constexpr (detail::is_same<T, half_t>) {
    return __ushort_as_half(0x7c00);
  } else if constexpr (detail::is_same<T, bfloat16_t>) {
    return __ushort_as_bfloat16(0x7f80);
  } else if constexpr (detail::is_same<T, fp8_e5m2_t>) {
    return detail::fp8_from_bits<T>(0x7c);
  } else {
    static_assert(detail::is_integer<T>, "infinity<T>: T is not a number type");
    return detail::integer_max<T>();
  }
}

template <typename T>
TEGULA_DEVICE T ninfinity() {
  if constexpr (detail::is_same<T, float>) {
    return __int_as_float(static_cast<int>(0xff800000u));
  } else if constexpr (detail::is_same<T, double>) {
    return __longlong_as_double(static_cast<long long>(0xfff0000000000000ull));
  } else if constexpr (detail::is_same<T, half_t>) {
    return __ushort_as_half(0xfc00);
  } else if constexpr (detail::is_same<T, bfloat16_t>) {
    return __ushort_as_bfloat16(0xff80);
  } else if constexpr (detail::is_same<T, fp8_e5m2_t>) {
    return detail::fp8_from_bits<T>(0xfc);
  } else {
    static_assert(detail::is_integer<T>, "ninfinity<T>: T is not a number type");
    return detail::integer_min<T>();
  }
}

// Largest finite value (T.max_value): 65504 for half_t, about 3.39e38 for bfloat16_t.
template <typename T>
TEGULA_DEVICE T max_value() {
  if constexpr (detail::is_same<T, float>) {
    return __int_as_float(0x7f7fffff);
  } else if constexpr (detail::is_same<T, double>) {
    return __longlong_as_double(0x7fefffffffffffffll);
  } else if constexpr (detail::is_same<T, half_t>) {
    return __ushort_as_half(0x7bff);
  } else if constexpr (detail::is_same<T, bfloat16_t>) {
    return __ushort_as_bfloat16(0x7f7f);
  } else if constexpr (detail::is_same<T, fp8_e4m3_t>) {
    return detail::fp8_from_bits<T>(0x7e);  // 448
  } else if constexpr (detail::is_same<T, fp8_e5m2_t>) {
    return detail::fp8_from_bits<T>(0x7b);  // 57344
  } else if constexpr (detail::is_same<T, bool>) {
    return true;
  } else {
    static_assert(detail::is_integer<T>, "max_value<T>: T is not a number type");
    return detail::integer_max<T>();
  }
}

// Most negative finite value (T.min_value): -max_value for floats, not the smallest
// positive number that C's FLT_MIN names.
template <typename T>
TEGULA_DEVICE T min_value() {
  if constexpr (detail::is_same<T, float>) {
    return __int_as_float(static_cast<int>(0xff7fffffu));
  } else if constexpr (detail::is_same<T, double>) {
    return __longlong_as_double(static_cast<long long>(0xffefffffffffffffull));
  } else if constexpr (detail::is_same<T, half_t>) {
    return __ushort_as_half(0xfbff);
  } else if constexpr (detail::is_same<T, bfloat16_t>) {
    return __ushort_as_bfloat16(0xff7f);
  } else if constexpr (detail::is_same<T, fp8_e4m3_t>) {
    return detail::fp8_from_bits<T>(0xfe);  // -448
  } else if constexpr (detail::is_same<T, fp8_e5m2_t>) {
    return detail::fp8_from_bits<T>(0xfb);  // -57344
  } else if constexpr (detail::is_same<T, bool>) {
    return false;
  } else {
    static_assert(detail::is_integer<T>, "min_value<T>: T is not a number type");
    return detail::integer_min<T>();
  }
}

}  // namespace tegula
