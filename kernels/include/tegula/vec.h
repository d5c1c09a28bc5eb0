// Short vectors of registers and the single wide memory access that moves one.
//
// The vectorise pass turns an innermost loop of N contiguous elements into one
// load_vec<N> / store_vec, so one thread issues a single 4, 8 or 16-byte instruction
// (LDG.128 for 8 halves) instead of N narrow ones. The pointer must be aligned to the
// vector's size; the pass proves that before it emits the call.
#pragma once

#include "tegula/config.h"

namespace tegula {

namespace detail {

// Largest power of two dividing `bytes`: a Vec of 3 floats is 12 bytes and 4-aligned.
TEGULA_HOST_DEVICE constexpr int vec_alignment(int bytes) { return bytes & -bytes; }

// The unsigned word the hardware moves in one access of `kBytes`.
template <int kBytes> struct Word;
template <> struct Word<1> { using type = unsigned char; };
template <> struct Word<2> { using type = unsigned short; };
template <> struct Word<4> { using type = unsigned int; };
template <> struct Word<8> { using type = uint2; };
template <> struct Word<16> { using type = uint4; };

// A 32-byte vector (8 floats) moves as two 16-byte accesses: sm_80 and sm_90 have no
// wider load, and 32 bytes keeps Vec usable for the 8-lane accumulator rows of a tile.
template <int kBytes>
inline constexpr int kAccesses = kBytes > 16 ? kBytes / 16 : 1;
template <int kBytes>
inline constexpr int kAccessBytes = kBytes > 16 ? 16 : kBytes;

}  // namespace detail

template <typename T, int N>
struct alignas(detail::vec_alignment(sizeof(T) * N)) Vec {
  static_assert(N > 0, "Vec needs at least one lane");
  T v[N];

  TEGULA_DEVICE T& operator[](int i) { return v[i]; }
  TEGULA_DEVICE const T& operator[](int i) const { return v[i]; }
};

// One access of sizeof(T) * N bytes; p must be aligned to that many bytes.
template <int N, typename T>
TEGULA_DEVICE Vec<T, N> load_vec(const T* p) {
  constexpr int kBytes = sizeof(T) * N;
  static_assert(kBytes == 1 || kBytes == 2 || kBytes == 4 || kBytes == 8 || kBytes == 16 ||
                    kBytes == 32,
                "load_vec moves 1, 2, 4, 8, 16 or 32 bytes");
  using W = typename detail::Word<detail::kAccessBytes<kBytes>>::type;
  Vec<T, N> out;
  const W* src = reinterpret_cast<const W*>(p);
  W* dst = reinterpret_cast<W*>(&out);
#pragma unroll
  for (int i = 0; i < detail::kAccesses<kBytes>; ++i) dst[i] = src[i];
  return out;
}

template <int N, typename T>
TEGULA_DEVICE void store_vec(T* p, const Vec<T, N>& value) {
  constexpr int kBytes = sizeof(T) * N;
  static_assert(kBytes == 1 || kBytes == 2 || kBytes == 4 || kBytes == 8 || kBytes == 16 ||
                    kBytes == 32,
                "store_vec moves 1, 2, 4, 8, 16 or 32 bytes");
  using W = typename detail::Word<detail::kAccessBytes<kBytes>>::type;
  const W* src = reinterpret_cast<const W*>(&value);
  W* dst = reinterpret_cast<W*>(p);
#pragma unroll
  for (int i = 0; i < detail::kAccesses<kBytes>; ++i) dst[i] = src[i];
}

// The ragged tail of a row: lanes [0, valid) are read one by one (the tail is neither
// aligned nor, past `valid`, inside the allocation), lanes [valid, N) become `fill`.
// Example: N = 4, valid = 3, p -> {a, b, c, <end of tensor>} gives {a, b, c, fill}.
template <int N, typename T>
TEGULA_DEVICE Vec<T, N> load_vec_pred(const T* p, int valid, T fill) {
  Vec<T, N> out;
#pragma unroll
  for (int i = 0; i < N; ++i) out.v[i] = i < valid ? p[i] : fill;
  return out;
}

// The matching store: only lanes [0, valid) are written.
template <int N, typename T>
TEGULA_DEVICE void store_vec_pred(T* p, const Vec<T, N>& value, int valid) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    if (i < valid) p[i] = value.v[i];
  }
}

// Every lane set to `x`, for fills and for the identity a reduction starts from.
template <int N, typename T>
TEGULA_DEVICE Vec<T, N> broadcast_vec(T x) {
  Vec<T, N> out;
#pragma unroll
  for (int i = 0; i < N; ++i) out.v[i] = x;
  return out;
}

}  // namespace tegula
