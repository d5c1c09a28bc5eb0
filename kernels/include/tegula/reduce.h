// Reductions across the lanes of a warp.
//
// The reduce op lowers to: each thread folds its own elements with Op::operator(),
// then warp_reduce combines the partials of the lanes that share an output element,
// then (if the reduced axis spans warps) the generated code combines through shared
// memory. Which lanes share an element is a property of the layout, known when the
// kernel is generated, so it arrives as a bitmask of lane-index bits to fold over.
#pragma once

#include "tegula/cast.h"
#include "tegula/config.h"
#include "tegula/limits.h"
#include "tegula/math.h"

namespace tegula {

// Exchange with lane (lane ^ offset). Any trivially copyable T moves as 32-bit words;
// the overloads below give the common scalar types a single native shuffle.
template <typename T>
TEGULA_DEVICE T shfl_xor(T v, int offset) {
  constexpr int kWords = (sizeof(T) + 3) / 4;
  unsigned words[kWords] = {};
  memcpy(words, &v, sizeof(T));
#pragma unroll
  for (int i = 0; i < kWords; ++i) words[i] = __shfl_xor_sync(0xffffffffu, words[i], offset);
  memcpy(&v, words, sizeof(T));
  return v;
}
TEGULA_DEVICE float shfl_xor(float v, int offset) {
  return __shfl_xor_sync(0xffffffffu, v, offset);
}
TEGULA_DEVICE double shfl_xor(double v, int offset) {
  return __shfl_xor_sync(0xffffffffu, v, offset);
}
TEGULA_DEVICE int shfl_xor(int v, int offset) { return __shfl_xor_sync(0xffffffffu, v, offset); }
TEGULA_DEVICE unsigned shfl_xor(unsigned v, int offset) {
  return __shfl_xor_sync(0xffffffffu, v, offset);
}
TEGULA_DEVICE long long shfl_xor(long long v, int offset) {
  return __shfl_xor_sync(0xffffffffu, v, offset);
}
TEGULA_DEVICE half_t shfl_xor(half_t v, int offset) {
  return __shfl_xor_sync(0xffffffffu, v, offset);
}
TEGULA_DEVICE bfloat16_t shfl_xor(bfloat16_t v, int offset) {
  return __shfl_xor_sync(0xffffffffu, v, offset);
}

// Each op: identity<T>() (the value that leaves any x unchanged), operator()(acc, x)
// folding one element into a thread's accumulator, and combine(a, b) merging two
// partial results. They differ only for the abs ops: folding takes |x|, merging
// partials (already non-negative) is a plain sum or max.
struct SumOp {
  template <typename T>
  TEGULA_DEVICE static T identity() { return cast<T>(0); }
  template <typename T>
  TEGULA_DEVICE T operator()(T acc, T x) const { return tegula::add(acc, x); }
  template <typename T>
  TEGULA_DEVICE static T combine(T a, T b) { return tegula::add(a, b); }
};

struct MaxOp {
  template <typename T>
  TEGULA_DEVICE static T identity() { return ninfinity<T>(); }
  template <typename T>
  TEGULA_DEVICE T operator()(T acc, T x) const { return tegula::max(acc, x); }
  template <typename T>
  TEGULA_DEVICE static T combine(T a, T b) { return tegula::max(a, b); }
};

struct MinOp {
  template <typename T>
  TEGULA_DEVICE static T identity() { return infinity<T>(); }
  template <typename T>
  TEGULA_DEVICE T operator()(T acc, T x) const { return tegula::min(acc, x); }
  template <typename T>
  TEGULA_DEVICE static T combine(T a, T b) { return tegula::min(a, b); }
};

struct AbsSumOp {
  template <typename T>
  TEGULA_DEVICE static T identity() { return cast<T>(0); }
  template <typename T>
  TEGULA_DEVICE T operator()(T acc, T x) const { return tegula::add(acc, tegula::abs(x)); }
  template <typename T>
  TEGULA_DEVICE static T combine(T a, T b) { return tegula::add(a, b); }
};

struct AbsMaxOp {
  template <typename T>
  TEGULA_DEVICE static T identity() { return cast<T>(0); }
  template <typename T>
  TEGULA_DEVICE T operator()(T acc, T x) const { return tegula::max(acc, tegula::abs(x)); }
  template <typename T>
  TEGULA_DEVICE static T combine(T a, T b) { return tegula::max(a, b); }
};

// Combine v over every lane whose index differs from this one only in the bits of
// lane_mask; every such lane ends with the same result (a butterfly, not a tree).
// lane_mask 0b11111: the whole warp. 0b00011: each quad {4k .. 4k+3}, as for the rows
// of an mma accumulator. 0b11100: lanes {r, r+4, ..., r+28}, i.e. a column of quads.
// All 32 lanes must call it together. With lane_mask a constant the loop folds away.
template <typename Op, typename T>
TEGULA_DEVICE T warp_reduce(T v, int lane_mask) {
#pragma unroll
  for (int offset = 16; offset >= 1; offset >>= 1) {
    if (lane_mask & offset) v = Op::combine(v, shfl_xor(v, offset));
  }
  return v;
}

}  // namespace tegula
