// Explicit-width memory accesses and bit reinterpretation (T.ldg32 ... T.sts128,
// T.reinterpret): one load or store of 4, 8, 16 or 32 bytes whose value is the raw bits,
// as unsigned words (Vec<unsigned, N> for more than one).
//
//   load_global_64(p)                 the 8 bytes at p, which must be 8-byte aligned
//   load_global_64_conditional(p, c)  the same when c holds, else 0 (p is not read)
//   load_global_64_unaligned(p)       any p: one access when p happens to be aligned,
//                                     else byte by byte (what the printer calls when it
//                                     cannot prove the alignment at compile time)
//   store_global_64(p, v[, c])        and the same for stores; likewise load_shared_* /
//                                     store_shared_*
//
// A 32-byte access is two 16-byte ones before sm_100, which has no wider instruction.
#pragma once

#include "tegula/config.h"
#include "tegula/vec.h"

namespace tegula {

// The bits of `from` as a value of type To (of the same size): float <-> unsigned,
// Vec<unsigned, 4> <-> Vec<float, 4>, half_t <-> unsigned short.
namespace detail {

// n bytes from src to dst, one at a time (NVRTC has no memcpy; the compiler turns a copy
// between registers into moves).
TEGULA_DEVICE void copy_bytes(void* dst, const void* src, int n) {
#pragma unroll
  for (int i = 0; i < n; ++i) static_cast<unsigned char*>(dst)[i] = static_cast<const unsigned char*>(src)[i];
}

}  // namespace detail

template <typename To, typename From>
TEGULA_DEVICE To reinterpret(const From& from) {
  static_assert(sizeof(To) == sizeof(From), "reinterpret needs types of one width");
  To out;
  detail::copy_bytes(&out, &from, sizeof(To));
  return out;
}

namespace detail {

template <int kBits> struct RawBits { using type = Vec<unsigned, kBits / 32>; };
template <> struct RawBits<32> { using type = unsigned; };

template <int kBits>
using Raw = typename RawBits<kBits>::type;

template <int kBits>
TEGULA_DEVICE Raw<kBits> load_raw(const void* p) {
  Raw<kBits> out;
  if constexpr (kBits == 32) {
    out = *static_cast<const unsigned*>(p);
  } else if constexpr (kBits == 64) {
    *reinterpret_cast<uint2*>(&out) = *static_cast<const uint2*>(p);
  } else if constexpr (kBits == 128) {
    *reinterpret_cast<uint4*>(&out) = *static_cast<const uint4*>(p);
  } else {
#if TEGULA_ARCH >= 1000 && defined(__CUDA_ARCH__)
    asm volatile("ld.global.v8.u32 {%0, %1, %2, %3, %4, %5, %6, %7}, [%8];"
                 : "=r"(out.v[0]), "=r"(out.v[1]), "=r"(out.v[2]), "=r"(out.v[3]), "=r"(out.v[4]),
                   "=r"(out.v[5]), "=r"(out.v[6]), "=r"(out.v[7])
                 : "l"(p));
#else
    const uint4* src = static_cast<const uint4*>(p);
    reinterpret_cast<uint4*>(&out)[0] = src[0];
    reinterpret_cast<uint4*>(&out)[1] = src[1];
#endif
  }
  return out;
}

template <int kBits>
TEGULA_DEVICE void store_raw(void* p, const Raw<kBits>& v) {
  if constexpr (kBits == 32) {
    *static_cast<unsigned*>(p) = v;
  } else if constexpr (kBits == 64) {
    *static_cast<uint2*>(p) = *reinterpret_cast<const uint2*>(&v);
  } else if constexpr (kBits == 128) {
    *static_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(&v);
  } else {
#if TEGULA_ARCH >= 1000 && defined(__CUDA_ARCH__)
    asm volatile("st.global.v8.u32 [%0], {%1, %2, %3, %4, %5, %6, %7, %8};" ::"l"(p), "r"(v.v[0]), "r"(v.v[1]),
                 "r"(v.v[2]), "r"(v.v[3]), "r"(v.v[4]), "r"(v.v[5]), "r"(v.v[6]), "r"(v.v[7])
                 : "memory");
#else
    uint4* dst = static_cast<uint4*>(p);
    dst[0] = reinterpret_cast<const uint4*>(&v)[0];
    dst[1] = reinterpret_cast<const uint4*>(&v)[1];
#endif
  }
}

template <int kBits>
TEGULA_DEVICE bool is_aligned(const void* p) {
  return (reinterpret_cast<uint64_t>(p) & (kBits / 8 - 1)) == 0;
}

template <int kBits>
TEGULA_DEVICE Raw<kBits> load_any(const void* p) {
  if (is_aligned<kBits>(p)) return load_raw<kBits>(p);
  Raw<kBits> out;
  copy_bytes(&out, p, kBits / 8);
  return out;
}

template <int kBits>
TEGULA_DEVICE void store_any(void* p, const Raw<kBits>& v) {
  if (is_aligned<kBits>(p)) return store_raw<kBits>(p, v);
  copy_bytes(p, &v, kBits / 8);
}

}  // namespace detail

// Shared memory has no 32-byte access: its widest is 16 bytes.
#define TEGULA_LDST(SPACE, BITS, LOAD)                                                                      \
  TEGULA_DEVICE detail::Raw<BITS> load_##SPACE##_##BITS(const void* p) { return LOAD<BITS>(p); }           \
  TEGULA_DEVICE detail::Raw<BITS> load_##SPACE##_##BITS##_conditional(const void* p, bool pred) {          \
    detail::Raw<BITS> out{};                                                                                \
    if (pred) out = LOAD<BITS>(p);                                                                          \
    return out;                                                                                             \
  }                                                                                                         \
  TEGULA_DEVICE detail::Raw<BITS> load_##SPACE##_##BITS##_unaligned(const void* p) {                       \
    return detail::load_any<BITS>(p);                                                                       \
  }                                                                                                         \
  TEGULA_DEVICE detail::Raw<BITS> load_##SPACE##_##BITS##_unaligned_conditional(const void* p, bool pred) { \
    detail::Raw<BITS> out{};                                                                                \
    if (pred) out = detail::load_any<BITS>(p);                                                              \
    return out;                                                                                             \
  }                                                                                                         \
  TEGULA_DEVICE void store_##SPACE##_##BITS(void* p, const detail::Raw<BITS>& v) {                         \
    detail::store_raw<BITS>(p, v);                                                                          \
  }                                                                                                         \
  TEGULA_DEVICE void store_##SPACE##_##BITS##_conditional(void* p, const detail::Raw<BITS>& v, bool pred) { \
    if (pred) detail::store_raw<BITS>(p, v);                                                                \
  }                                                                                                         \
  TEGULA_DEVICE void store_##SPACE##_##BITS##_unaligned(void* p, const detail::Raw<BITS>& v) {             \
    detail::store_any<BITS>(p, v);                                                                          \
  }                                                                                                         \
  TEGULA_DEVICE void store_##SPACE##_##BITS##_unaligned_conditional(void* p, const detail::Raw<BITS>& v,   \
                                                                    bool pred) {                            \
    if (pred) detail::store_any<BITS>(p, v);                                                                \
  }

TEGULA_LDST(global, 32, detail::load_raw)
TEGULA_LDST(global, 64, detail::load_raw)
TEGULA_LDST(global, 128, detail::load_raw)
TEGULA_LDST(global, 256, detail::load_raw)
TEGULA_LDST(shared, 32, detail::load_raw)
TEGULA_LDST(shared, 64, detail::load_raw)
TEGULA_LDST(shared, 128, detail::load_raw)
#undef TEGULA_LDST

}  // namespace tegula
