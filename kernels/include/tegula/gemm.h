// Block-level GEMM on tensor cores (mma.sync m16n8k16, operands through ldmatrix), the
// code T.gemm(A_shared, B_shared, C_fragment) lowers to.
//
// The block's warps tile the M x N output as WM x WN; warp w takes the tile at
// (w % WM, w / WM), made of (M/WM/16) x (N/WN/8) mma tiles. The accumulator registers of
// a thread are ordered [mi][ni][e]: e = 0,1 are row g = lane/4, columns 2*(lane%4)+{0,1}
// of mma tile (mi, ni); e = 2,3 the same columns of row g + 8. The compiler's layout for
// the C fragment (layout/mma.cc) is this order, so epilogues in T.Parallel read it.
//
// A is M x K row-major (K x M when TA), B is K x N row-major (N x K when TB), both in
// shared memory with K (and N) multiples of 8 elements so every ldmatrix row is 16-byte
// aligned.
#pragma once
#include "tegula/mma.h"

namespace tegula {

// Element offset of (r, c) in a tile with C columns of E-byte elements, stored with its
// 16-byte chunks XOR-swizzled by row: the 8 rows an ldmatrix reads, at one logical chunk,
// land in 8 different bank groups. Chunks stay whole, so 16-byte vector accesses still
// work. Rows of >= 8 chunks xor the chunk's low 3 bits with r % 8; rows of 4 (or 2)
// chunks xor with r / 2 % 4 (or r / 4 % 2), since two (four) such rows fill 128 bytes.
template <int C, int E>
TEGULA_HOST_DEVICE constexpr int swizzle_offset(int r, int c) {
  constexpr int kChunk = 16 / E;
  constexpr int kChunks = C / kChunk;
  constexpr int kBits = kChunks >= 8 ? 8 : kChunks;
  constexpr int kRowsPerPhase = 8 / kBits;
  return r * C + (((c / kChunk) ^ ((r / kRowsPerPhase) % kBits)) * kChunk) + c % kChunk;
}

template <int C, typename T, bool kSwizzled>
TEGULA_DEVICE const T* tile_at(const T* base, int r, int c) {
  if constexpr (kSwizzled) {
    return base + swizzle_offset<C, int(sizeof(T))>(r, c);
  } else {
    return base + r * C + c;
  }
}

// The instruction for the operand type, chosen by overload on a pointer to it.
TEGULA_DEVICE void mma_f32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], const half_t*) {
  mma_m16n8k16_f16f32(d, a, b, d);
}
TEGULA_DEVICE void mma_f32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], const bfloat16_t*) {
  mma_m16n8k16_bf16f32(d, a, b, d);
}

template <int M, int N, int K, int WM, int WN, bool TA, bool TB, bool SA, bool SB, typename T>
TEGULA_DEVICE void gemm_ss(const T* A, const T* B, float* C) {
  static_assert(!TA, "T.gemm with transpose_A is not supported yet");
  static_assert(M % (WM * 16) == 0 && N % (WN * 8) == 0 && K % 16 == 0, "tile does not fit the mma shape");
  constexpr int TM = M / WM, TN = N / WN, MT = TM / 16, NT = TN / 8;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int row0 = (warp % WM) * TM, col0 = (warp / WM) * TN;
#pragma unroll
  for (int k0 = 0; k0 < K; k0 += 16) {
    uint32_t a[MT][4];
    uint32_t b[NT][2];
#pragma unroll
    for (int mi = 0; mi < MT; ++mi) {
      // Lanes 0-15 address rows 0-15 at column k0, lanes 16-31 the same rows at k0 + 8.
      ldmatrix_x4(a[mi], tile_at<K, T, SA>(A, row0 + mi * 16 + lane % 16, k0 + (lane / 16) * 8));
    }
#pragma unroll
    for (int ni = 0; ni < NT; ++ni) {
      if constexpr (TB) {
        // B^T rows are B columns: plain ldmatrix gives each thread two consecutive k.
        ldmatrix_x2(b[ni], tile_at<K, T, SB>(B, col0 + ni * 8 + lane % 8, k0 + ((lane / 8) % 2) * 8));
      } else {
        // Rows k0..k0+15 of a K x N tile, transposed on the way into registers.
        ldmatrix_x2_trans(b[ni], tile_at<N, T, SB>(B, k0 + lane % 16, col0 + ni * 8));
      }
    }
#pragma unroll
    for (int mi = 0; mi < MT; ++mi) {
#pragma unroll
      for (int ni = 0; ni < NT; ++ni) {
        mma_f32(*reinterpret_cast<float(*)[4]>(&C[(mi * NT + ni) * 4]), a[mi], b[ni], A);
      }
    }
  }
}

}  // namespace tegula
