// Approximate forms for kernels that tolerate a few ulp and flush denormals to zero,
// such as the exponentials of a softmax. Each is one MUFU instruction (plus a multiply
// for exp_fast), against the range reduction and correction steps of exp2f.
#pragma once

#include "tegula/cast.h"
#include "tegula/config.h"

namespace tegula {

// 2^x, within a couple of ulp; exp2(-inf) is 0 and large x gives +inf, as softmax needs.
TEGULA_DEVICE float exp2_fast(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// log2(x), accurate in absolute rather than relative terms near x = 1.
TEGULA_DEVICE float log2_fast(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// e^x = 2^(x * log2 e); the rounding of the product costs up to |x| * 2^-24 relative.
TEGULA_DEVICE float exp_fast(float x) { return exp2_fast(x * 1.4426950408889634f); }

// 1 / x without the Newton step and special-case handling of IEEE division.
TEGULA_DEVICE float rcp_fast(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

#define TEGULA_DEFINE_FAST_16(name)                                               \
  TEGULA_DEVICE half_t name(half_t x) { return __float2half_rn(name(to_float(x))); } \
  TEGULA_DEVICE bfloat16_t name(bfloat16_t x) {                                   \
    return __float2bfloat16_rn(name(to_float(x)));                                \
  }
TEGULA_DEFINE_FAST_16(exp2_fast)
TEGULA_DEFINE_FAST_16(log2_fast)
TEGULA_DEFINE_FAST_16(exp_fast)
#undef TEGULA_DEFINE_FAST_16

}  // namespace tegula
