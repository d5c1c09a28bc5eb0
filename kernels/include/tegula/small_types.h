// The element types narrower than CUDA's own: float8_e8m0fnu (fp8_e8m0_t), float4_e2m1fn
// (fp4_e2m1_t), int4 (int4b_t) and uint4 (uint4b_t). Each is a byte in registers and shared
// memory; in global memory the 4-bit ones are packed two to a byte, the element of even
// index in the low nibble (packed_load, packed_store). Storage types: cast converts them,
// and the frontend computes on them in float32 or int32.
#pragma once

#include "tegula/config.h"

namespace tegula {

// An unsigned power of two 2^(bits - 127); bits 255 is NaN (torch.float8_e8m0fnu).
struct fp8_e8m0_t {
  unsigned char bits;
  static TEGULA_DEVICE fp8_e8m0_t from_bits(unsigned b) { return {static_cast<unsigned char>(b)}; }
  // torch's rounding: the float32 exponent, rounded up when the mantissa is past half, or
  // exactly half with the implicit bit set; the sign is dropped; inf and NaN give NaN.
  static TEGULA_DEVICE fp8_e8m0_t from_float(float f) {
    unsigned u = __float_as_uint(f), e = (u >> 23) & 0xff;
    if (e == 0xff) return from_bits(0xff);
    bool g = u & 0x400000, rest = u & 0x3fffff;
    return from_bits(e + (g && (rest || e > 0)));
  }
  TEGULA_DEVICE float to_float() const {
    if (bits == 0) return __uint_as_float(0x00400000u);  // 2^-127, a float32 subnormal
    if (bits == 0xff) return __uint_as_float(0x7fc00000u);
    return __uint_as_float(unsigned(bits) << 23);
  }
};

// e2m1: sign, 2 exponent bits, 1 mantissa bit: +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}; no inf, no NaN.
struct fp4_e2m1_t {
  unsigned char bits;  // the low nibble
  static TEGULA_DEVICE fp4_e2m1_t from_bits(unsigned b) { return {static_cast<unsigned char>(b & 0xf)}; }
  // To nearest, ties to even, saturating to +-6 (CUDA's satfinite); NaN gives +6.
  static TEGULA_DEVICE fp4_e2m1_t from_float(float f) {
    if (f != f) return from_bits(0x7);
    float a = fabsf(f);
    unsigned m = a <= 0.25f ? 0 : a < 0.75f ? 1 : a <= 1.25f ? 2 : a < 1.75f ? 3 : a <= 2.5f ? 4 : a < 3.5f ? 5 : a <= 5.0f ? 6 : 7;
    return from_bits(m | ((__float_as_uint(f) >> 31) << 3));
  }
  TEGULA_DEVICE float to_float() const {
    const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    float v = mag[bits & 7];
    return bits & 8 ? -v : v;
  }
  TEGULA_DEVICE unsigned nibble() const { return bits & 0xf; }
};

// tfloat32: a float32 of 10 mantissa bits (the tensor cores' tf32), the low 13 bits zero.
// From a float it rounds to nearest, ties away from zero (cvt.rna.tf32.f32, sm_80 on);
// back to float it is exact. 4 bytes, so a tf32 tile is a float32 tile to memory.
struct tf32_t {
  float value;
  static TEGULA_DEVICE tf32_t from_float(float f) {
#if TEGULA_ARCH >= 800
    unsigned u;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(u) : "f"(f));
    return {__uint_as_float(u)};
#else
    unsigned u = __float_as_uint(f);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & ~0x1fffu;
    return {__uint_as_float(u)};
#endif
  }
  TEGULA_DEVICE float to_float() const { return value; }
};

// 4-bit integers: from an integer they wrap (as every integer narrowing does), from a float
// they truncate and saturate (NaN gives 0).
struct int4b_t {
  signed char value;  // -8 .. 7
  static TEGULA_DEVICE int4b_t from_bits(unsigned b) { return {static_cast<signed char>(int((b & 0xf) ^ 0x8) - 8)}; }
  static TEGULA_DEVICE int4b_t wrap(long long v) { return from_bits(unsigned(v & 0xf)); }
  static TEGULA_DEVICE int4b_t from_float(float f) {
    return {static_cast<signed char>(f != f ? 0 : f <= -8.0f ? -8 : f >= 7.0f ? 7 : int(f))};
  }
  TEGULA_DEVICE unsigned nibble() const { return unsigned(value) & 0xf; }
};
struct uint4b_t {
  unsigned char value;  // 0 .. 15
  static TEGULA_DEVICE uint4b_t from_bits(unsigned b) { return {static_cast<unsigned char>(b & 0xf)}; }
  static TEGULA_DEVICE uint4b_t wrap(long long v) { return from_bits(unsigned(v & 0xf)); }
  static TEGULA_DEVICE uint4b_t from_float(float f) {
    return {static_cast<unsigned char>(f != f || f <= 0.0f ? 0 : f >= 15.0f ? 15 : int(f))};
  }
  TEGULA_DEVICE unsigned nibble() const { return value; }
};

TEGULA_DEVICE float to_float(fp8_e8m0_t x) { return x.to_float(); }
TEGULA_DEVICE float to_float(fp4_e2m1_t x) { return x.to_float(); }
TEGULA_DEVICE float to_float(tf32_t x) { return x.value; }

namespace detail {
template <typename T>
inline constexpr bool is_minifloat = is_same<T, fp8_e8m0_t> || is_same<T, fp4_e2m1_t> || is_same<T, tf32_t>;
template <typename T>
inline constexpr bool is_int4 = is_same<T, int4b_t> || is_same<T, uint4b_t>;
}  // namespace detail

// Element `off` of a packed 4-bit tensor (off counts elements: byte off / 2).
template <typename T>
TEGULA_DEVICE T packed_load(const unsigned char* p, long long off) {
  unsigned b = p[off >> 1];
  return T::from_bits(off & 1 ? b >> 4 : b & 0xf);
}

// Writes element `off` of a packed 4-bit tensor: a compare-and-swap on the aligned 32-bit
// word that holds its byte, so two threads writing the two nibbles of one byte (or of one
// word) both land. The word stays inside the allocation: CUDA allocations are 256-byte
// aligned.
template <typename T>
TEGULA_DEVICE void packed_store(unsigned char* p, long long off, T v) {
  unsigned long long addr = reinterpret_cast<unsigned long long>(p + (off >> 1));
  unsigned* word = reinterpret_cast<unsigned*>(addr & ~3ull);
  int shift = int(addr & 3) * 8 + int(off & 1) * 4;
  unsigned mask = 0xfu << shift, bits = v.nibble() << shift;
  unsigned old = *reinterpret_cast<volatile unsigned*>(word), assumed;
  do {
    assumed = old;
    if ((assumed & mask) == bits) return;
    old = atomicCAS(word, assumed, (assumed & ~mask) | bits);
  } while (old != assumed);
}

}  // namespace tegula
