// Scalar math for the element types of the tile IR: float, double, half_t, bfloat16_t
// (and integers where the operation means something for them).
//
// half_t and bfloat16_t are computed in float and rounded once at the end: float
// carries more than twice their precision, so the result is as good as a native 16-bit
// routine would give, and often better (hexp is an approximation). abs, max, min and
// fma have exact native 16-bit instructions on sm_80+, so those stay native. max and min
// propagate NaN (see below).
//
// Every function is a template on the element type. Generated code says `using
// namespace tegula;`, and CUDA declares max(float, float), exp(float), ... in the global
// namespace: were ours plain overloads, an unqualified max(a, b) would be ambiguous.
// As templates they lose that tie to CUDA's function, which means the same thing.
#pragma once

// fast_math.h and limits.h come with math.h: exp2_fast, infinity<T>() and the rest.
#include "tegula/cast.h"
#include "tegula/config.h"
#include "tegula/fast_math.h"
#include "tegula/limits.h"

namespace tegula {

// Unary functions as data: name, float routine, double routine. The 16-bit types widen
// to float, call the float routine and round back.
#define TEGULA_UNARY_MATH(X) \
  X(exp, expf, exp)          \
  X(exp2, exp2f, exp2)       \
  X(log, logf, log)          \
  X(log2, log2f, log2)       \
  X(sqrt, sqrtf, sqrt)       \
  X(rsqrt, rsqrtf, rsqrt)    \
  X(tanh, tanhf, tanh)       \
  X(sin, sinf, sin)          \
  X(cos, cosf, cos)          \
  X(floor, floorf, floor)    \
  X(ceil, ceilf, ceil)       \
  X(trunc, truncf, trunc)    \
  X(rint, rintf, rint)

#define TEGULA_DEFINE_UNARY(name, float_fn, double_fn)                                 \
  template <typename T>                                                               \
  TEGULA_DEVICE T name(T x) {                                                         \
    if constexpr (detail::is_same<T, float>) {                                        \
      return ::float_fn(x);                                                           \
    } else if constexpr (detail::is_same<T, double>) {                                \
      return ::double_fn(x);                                                          \
    } else {                                                                          \
      static_assert(detail::is_16bit_float<T>, #name ": T is not a floating type");   \
      return detail::from_float<T>(::float_fn(to_float(x)));                          \
    }                                                                                 \
  }
TEGULA_UNARY_MATH(TEGULA_DEFINE_UNARY)
#undef TEGULA_DEFINE_UNARY

// 1 / (1 + e^-x), in float for the 16-bit types.
template <typename T>
TEGULA_DEVICE T sigmoid(T x) {
  if constexpr (detail::is_same<T, double>) {
    return 1.0 / (1.0 + ::exp(-x));
  } else {
    float y = 1.0f / (1.0f + ::expf(-to_float(x)));
    return cast<T>(y);
  }
}

template <typename T>
TEGULA_DEVICE T abs(T x) {
  if constexpr (detail::is_same<T, float>) {
    return ::fabsf(x);
  } else if constexpr (detail::is_same<T, double>) {
    return ::fabs(x);
  } else if constexpr (detail::is_16bit_float<T>) {
    return __habs(x);
  } else if constexpr (detail::is_signed_integer<T>) {
    return x < T(0) ? T(-x) : x;
  } else {
    // bool is the integers 0 and 1 (TVM's uint1): its own absolute value.
    static_assert(detail::is_integer<T> || detail::is_same<T, bool>, "abs: T is not a number type");
    return x;
  }
}

// max/min propagate NaN, like torch.maximum / torch.amax: if either operand is NaN the
// result is NaN (fmaxf would return the other operand and hide it). sm_80+ has the
// .NaN forms of max/min for f32, f16 and bf16, one instruction like the plain ones; older
// parts and double get a compare in front of fmax. Reductions never feed a masked-off lane
// in: their identities are -inf / +inf, and padding is set to those before a max.
namespace detail {
template <typename T>
TEGULA_DEVICE T nan_aware(T a, T b, T plain) {
  return (a != a || b != b) ? T(a + b) : plain;  // a + b is the NaN operand's NaN
}
}  // namespace detail

template <typename T>
TEGULA_DEVICE T max(T a, T b) {
  if constexpr (detail::is_same<T, float>) {
#if TEGULA_ARCH >= 800
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
#else
    return detail::nan_aware(a, b, ::fmaxf(a, b));
#endif
  } else if constexpr (detail::is_same<T, double>) {
    return detail::nan_aware(a, b, ::fmax(a, b));
  } else if constexpr (detail::is_16bit_float<T>) {
    return __hmax_nan(a, b);
  } else {
    // On bool (0 and 1): a || b.
    static_assert(detail::is_integer<T> || detail::is_same<T, bool>, "max: T is not a number type");
    return a < b ? b : a;
  }
}

template <typename T>
TEGULA_DEVICE T min(T a, T b) {
  if constexpr (detail::is_same<T, float>) {
#if TEGULA_ARCH >= 800
    float r;
    asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
#else
    return detail::nan_aware(a, b, ::fminf(a, b));
#endif
  } else if constexpr (detail::is_same<T, double>) {
    return detail::nan_aware(a, b, ::fmin(a, b));
  } else if constexpr (detail::is_16bit_float<T>) {
    return __hmin_nan(a, b);
  } else {
    // On bool (0 and 1): a && b.
    static_assert(detail::is_integer<T> || detail::is_same<T, bool>, "min: T is not a number type");
    return b < a ? b : a;
  }
}

// a + b without the operators of cuda_fp16.h, which a build may switch off with
// __CUDA_NO_HALF_OPERATORS__.
template <typename T>
TEGULA_DEVICE T add(T a, T b) {
  if constexpr (detail::is_16bit_float<T>) {
    return __hadd(a, b);
  } else {
    return a + b;
  }
}

// a * b + c with a single rounding.
template <typename T>
TEGULA_DEVICE T fma(T a, T b, T c) {
  if constexpr (detail::is_same<T, float>) {
    return ::fmaf(a, b, c);
  } else if constexpr (detail::is_same<T, double>) {
    return ::fma(a, b, c);
  } else {
    static_assert(detail::is_16bit_float<T>, "fma: T is not a floating type");
    return __hfma(a, b, c);
  }
}

// Python's // and % on integers: the quotient rounds toward -inf and the remainder
// takes the divisor's sign. floordiv(-7, 2) == -4, floormod(-7, 2) == 1, where C++
// gives -3 and -1. On floats: floor(a / b) and a - b * floor(a / b).
template <typename T>
TEGULA_DEVICE T floordiv(T a, T b) {
  if constexpr (detail::is_same<T, double>) {
    return ::floor(a / b);
  } else if constexpr (detail::is_float<T>) {
    return cast<T>(::floorf(to_float(a) / to_float(b)));
  } else if constexpr (detail::is_signed_integer<T>) {
    T q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? T(q - 1) : q;
  } else {
    return a / b;
  }
}
template <typename T>
TEGULA_DEVICE T floormod(T a, T b) {
  if constexpr (detail::is_same<T, double>) {
    return a - b * ::floor(a / b);
  } else if constexpr (detail::is_float<T>) {
    float fa = to_float(a), fb = to_float(b);
    return cast<T>(fa - fb * ::floorf(fa / fb));
  } else if constexpr (detail::is_signed_integer<T>) {
    T r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? T(r + b) : r;
  } else {
    return a % b;
  }
}

// ceildiv(10, 4) == 3: the number of tiles covering an extent. For the non-negative
// extents and positive tile sizes the generated code divides; usable on the host too.
template <typename T>
TEGULA_HOST_DEVICE constexpr T ceildiv(T a, T b) {
  return (a + b - 1) / b;
}

}  // namespace tegula

