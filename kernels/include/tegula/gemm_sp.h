// Block-level 2:4 structured-sparse GEMM on the sparse tensor cores (mma.sp m16n8k32,
// sm_80+), the code T.gemm_sp lowers to; src/ops/gemm_sp.cc gives the operands' meaning.
//
// A is the M x K/2 tile of A's kept elements (K/2 x M with TA), E its metadata, M x K/F
// (K/F x M with TE) integers of F = 8, 16 or 32 bits, each 4 bits one group of 4 dense
// columns (bits 0-1 the first kept element's position in it, bits 2-3 the second's). B
// is K x N (N x K with TB), all three in shared memory (gemm_sp_ss), or A in registers
// (gemm_sp_rs) as gemm_rs holds the A of an M x N x K/2 gemm; C accumulates in registers.
//
// The warps tile C as BlockGemm does (gemm.h): warp w owns rows (w % WM) * TM and columns
// (w / WM) * TN, its registers ordered [mi][ni][e] as there, so C's layout is T.gemm's.
// Per k-step of 32 dense columns ks, an mma tile (mi, ni) takes
//   A  the 16 x 16 tile of kept elements at column 16 ks: exactly the registers of a dense
//      m16n8k16 A, loaded as BlockGemm loads its A (ldmatrix, the same swizzle; or from
//      registers);
//   B  the 32 x 8 tile at row 32 ks: the two m16n8k16 B fragments at rows 32 ks and
//      32 ks + 16, loaded as BlockGemm loads B;
//   E  one register in lanes 4g + h (h = 0, 1: the threads sparsity selector 0 names):
//      the 16 metadata bits of row g of the tile for dense columns 32 ks + 16 h .. + 16 in
//      the low half, those of row g + 8 in the high half. Lanes 4g + 2 and 4g + 3 load the
//      same (the instruction ignores them). 16 bits of a row of E are 16 dense columns
//      whatever E's type: one element of int16, two of int8, half of one of int32.
// A group naming one position twice (0b0000 from zero padding past a tensor's edge; the
// instruction leaves it undefined) is made positions 0 and 1 on the way in.
#pragma once
#include "tegula/gemm.h"

namespace tegula {

// The metadata register with every group that names one position twice made 0b0100
// (positions 0 and 1): bit 0 of a nibble of `bad` is set when its two 2-bit halves agree.
TEGULA_DEVICE uint32_t valid_sparse_metadata(uint32_t e) {
  const uint32_t same = ~(e ^ (e >> 2));
  const uint32_t bad = same & (same >> 1) & 0x11111111u;
  return (e & ~(bad * 0xFu)) | (bad * 0x4u);
}

template <int M, int N, int K, int WM, int WN, bool TA, bool TB, bool TE, bool CLEAR, bool SA, bool SE, bool SB,
          int PA, int PB, bool RA, typename T, typename U, typename Meta>
struct SparseBlockGemm {
  static_assert(sizeof(T) == 2 && detail::is_same<T, U>, "T.gemm_sp multiplies 16-bit floats of one type");
  static_assert(sizeof(Meta) == 1 || sizeof(Meta) == 2 || sizeof(Meta) == 4, "metadata of 8, 16 or 32 bits");
  static_assert(K % 32 == 0 && M % (WM * 16) == 0 && N % (WN * 8) == 0, "tile does not fit mma.sp m16n8k32");
  static constexpr int F = 8 * int(sizeof(Meta));  // dense columns one element of E covers
  static constexpr int LDE = TE ? M : K / F;       // E's stored row length
  static constexpr int TM = M / WM, TN = N / WN, MT = TM / 16, NT = TN / 8;
  // The kept elements, read as the A of an M x N x K/2 gemm; B as the B of the dense one.
  using Kept = BlockGemm<M, N, K / 2, WM, WN, TA, TB, SA, SB, RA, false, T, U, 0, 0, 0, 0, PA, PB>;
  using Dense = BlockGemm<M, N, K, WM, WN, TA, TB, SA, SB, false, false, T, U, 0, 0, 0, 0, PA, PB>;

  // Element (r, e) of the logical M x K/F metadata tile, its bits in a uint32_t.
  static TEGULA_DEVICE uint32_t element(const Meta* E, int r, int e) {
    const Meta v = TE ? *tile_at<LDE, Meta, SE>(E, e, r) : *tile_at<LDE, Meta, SE>(E, r, e);
    if constexpr (sizeof(Meta) == 1) {
      return uint32_t(uint8_t(v));
    } else if constexpr (sizeof(Meta) == 2) {
      return uint32_t(uint16_t(v));
    } else {
      return uint32_t(v);
    }
  }

  // Bits 16 c .. 16 c + 15 of row r of E: the groups of dense columns 16 c .. 16 c + 15.
  static TEGULA_DEVICE uint32_t bits16(const Meta* E, int r, int c) {
    if constexpr (sizeof(Meta) == 1) {
      return element(E, r, 2 * c) | (element(E, r, 2 * c + 1) << 8);
    } else if constexpr (sizeof(Meta) == 2) {
      return element(E, r, c);
    } else {
      return (element(E, r, c / 2) >> (16 * (c % 2))) & 0xFFFFu;
    }
  }

  template <bool kZero>
  static TEGULA_DEVICE void mma(float* c, const uint32_t (&a)[4], const uint32_t (&b)[4], uint32_t e) {
    float(&d)[4] = *reinterpret_cast<float(*)[4]>(c);
    const float zero[4] = {0.f, 0.f, 0.f, 0.f};
    const float(*acc)[4] = kZero ? &zero : &d;
    if constexpr (detail::is_same<T, half_t>) {
      mma_sp_m16n8k32_f16f32(d, a, b, *acc, e);
    } else {
      mma_sp_m16n8k32_bf16f32(d, a, b, *acc, e);
    }
  }
  // float16 accumulation: slots 0, 1 (row g) and 2, 3 (row g + 8) are two half2 registers.
  template <bool kZero>
  static TEGULA_DEVICE void mma(half_t* c, const uint32_t (&a)[4], const uint32_t (&b)[4], uint32_t e) {
    uint32_t d[2] = {kZero ? 0u : pack2(c[0], c[1]), kZero ? 0u : pack2(c[2], c[3])};
    mma_sp_m16n8k32_f16f16(d, a, b, d, e);
    unpack2(d[0], c[0], c[1]);
    unpack2(d[1], c[2], c[3]);
  }

  template <typename Acc>
  static TEGULA_DEVICE void run(const T* A, const Meta* E, const U* B, Acc* C, unsigned tid) {
    const int lane = int(tid % 32u), warp = int(tid / 32u);
    const int row0 = (warp % WM) * TM, col0 = (warp / WM) * TN;
    const int g = lane / 4, h = lane % 2;
#pragma unroll
    for (int ks = 0; ks < K / 32; ++ks) {
      uint32_t a[MT][4], b0[NT][2], b1[NT][2], e[MT];
      Kept::load_a(a, A, row0, ks * 16, lane);
      Dense::load_b(b0, B, col0, ks * 32, lane);
      Dense::load_b(b1, B, col0, ks * 32 + 16, lane);
#pragma unroll
      for (int mi = 0; mi < MT; ++mi) {
        const int r = row0 + mi * 16 + g;
        e[mi] = valid_sparse_metadata(bits16(E, r, 2 * ks + h) | (bits16(E, r + 8, 2 * ks + h) << 16));
      }
#pragma unroll
      for (int mi = 0; mi < MT; ++mi) {
#pragma unroll
        for (int ni = 0; ni < NT; ++ni) {
          const uint32_t b[4] = {b0[ni][0], b0[ni][1], b1[ni][0], b1[ni][1]};
          if (CLEAR && ks == 0) {
            mma<true>(&C[(mi * NT + ni) * 4], a[mi], b, e[mi]);
          } else {
            mma<false>(&C[(mi * NT + ni) * 4], a[mi], b, e[mi]);
          }
        }
      }
    }
  }
};

// T.gemm_sp(A_sparse, E, B, C): A, E and B in shared memory. CLEAR: C = A B (clear_accum).
// SA / SE / SB: whether each is stored swizzled; PA / PB: the stored rows of an operand kept
// in wgmma's panels (0: not panelled). tid: the thread's index among the threads sharing
// the gemm.
template <int M, int N, int K, int WM, int WN, bool TA, bool TB, bool TE, bool CLEAR, bool SA, bool SE, bool SB,
          int PA = 0, int PB = 0, typename T, typename Meta, typename U, typename Acc>
TEGULA_DEVICE void gemm_sp_ss(const T* A, const Meta* E, const U* B, Acc* C, unsigned tid = threadIdx.x) {
  SparseBlockGemm<M, N, K, WM, WN, TA, TB, TE, CLEAR, SA, SE, SB, PA, PB, false, T, U, Meta>::run(A, E, B, C, tid);
}

// T.gemm_sp(A_fragment, E, B, C): the kept elements in registers, in the layout of an
// accumulator of the warps' split along M (an M x K/2 tile; transposed with TA), held by
// each of the WN columns of warps, as gemm_rs reads its A.
template <int M, int N, int K, int WM, int WN, bool TA, bool TB, bool TE, bool CLEAR, bool SA, bool SE, bool SB,
          int PA = 0, int PB = 0, typename T, typename Meta, typename U, typename Acc>
TEGULA_DEVICE void gemm_sp_rs(const T* A, const Meta* E, const U* B, Acc* C, unsigned tid = threadIdx.x) {
  SparseBlockGemm<M, N, K, WM, WN, TA, TB, TE, CLEAR, false, SE, SB, 0, PB, true, T, U, Meta>::run(A, E, B, C, tid);
}

}  // namespace tegula
