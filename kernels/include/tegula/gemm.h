// Block-level GEMM on tensor cores (mma.sync m16n8k16, operands through ldmatrix; m16n8k8
// tf32 for 32-bit operands, see below), the
// code T.gemm lowers to: gemm_ss when A is in shared memory, gemm_rs when A is a fragment.
//
// The block's warps tile the M x N output as WM x WN; warp w takes the tile at
// (w % WM, w / WM), made of (M/WM/16) x (N/WN/8) mma tiles. The accumulator registers of
// a thread are ordered [mi][ni][e]: e = 0,1 are row g = lane/4, columns 2*(lane%4)+{0,1}
// of mma tile (mi, ni); e = 2,3 the same columns of row g + 8. The compiler's layout for
// the C fragment (layout/mma.cc) is this order, so epilogues in T.Parallel read it.
//
// A is M x K row-major (K x M when TA), B is K x N row-major (N x K when TB), both in
// shared memory with K (and N) multiples of 8 elements so every ldmatrix row is 16-byte
// aligned; or A is in registers, laid out as an accumulator (see gemm_rs). C accumulates
// in float32, in float16 for float16 operands, or in int32 for integer ones.
//
// A shared operand may be a region of a larger buffer (T.gemm(Q_shared[:, :D], ...)): LDA /
// LDB are the buffers' stored row lengths (0: the operand's own width), OA / OB the
// column of the region's first element as stored (its row is in the pointer, a multiple
// of 8 so the swizzle phase is unchanged); a column offset along K is a multiple of the
// K step, one along M or N a multiple of the 16-byte chunk. The region is read through
// the buffer's layout, swizzle included.
//
// 8-bit float operands (A of type T and B of type U, e4m3 or e5m2 each) run m16n8k32
// (sm_89+): their registers hold the same bytes of a row as 16-bit m16n8k16 ones, so a
// k-step is 32 bytes of K either way and the ldmatrix addresses are the same in bytes.
// 8-bit operands are read K-major only: A as M x K, B as N x K (TB), both in shared memory.
//
// Integer operands (int8 / uint8, either of each) run m16n8k32 .s32 into int32 accumulators
// on sm_80 on, with the 8-bit floats' registers and addresses. Packed 4-bit ones (int4 /
// uint4, a byte each in shared memory as on chip everywhere) run m16n8k64: a k-step of 64
// elements is 64 bytes of a row, read as two 8-bit k-steps (the same ldmatrix addresses),
// whose registers pair up into the instruction's, a byte's low nibble each
// (pack_nibbles). The instruction names elements 8t .. 8t + 7 of a k half where a lane then
// holds elements 4t + j and 16 + 4t + j of it: a permutation of K, the same for A and B,
// so the products summed are the same.
//
// 32-bit operands (float32, rounded to tf32 on the way into a register, or tfloat32, already
// rounded) run m16n8k8 tf32, one element a register. A lane's registers hold the columns
// 2t and 2t + 1 of its rows (t = lane % 4) where the instruction names columns t and t + 4:
// a permutation of K, the same for A and B, so the products summed are the same. It makes
// a register A exactly an accumulator tile's registers (as for 16-bit operands) and a
// K-major shared operand two adjacent elements (one 8-byte load); an MN-major one takes
// two 4-byte loads.
#pragma once
#include "tegula/mma.h"
#include "tegula/small_types.h"

namespace tegula {

// Element offset of (r, c) in a tile with C columns of E-byte elements, stored with its
// 16-byte chunks XOR-swizzled by row: the 8 rows an ldmatrix reads, at one logical chunk,
// land in 8 different bank groups. Chunks stay whole, so 16-byte vector accesses still
// work. Rows of >= 8 chunks xor the chunk's low 3 bits with r % 8; rows of 4 (or 2)
// chunks xor with r / 2 % 4 (or r / 4 % 2), since two (four) such rows fill 128 bytes.
template <int C, int E>
struct Swizzle {
  static constexpr int kChunk = 16 / E;                 // elements in a 16-byte chunk
  static constexpr int kChunks = C / kChunk;            // chunks in a row
  static constexpr int kBits = kChunks >= 8 ? 8 : kChunks;
  static constexpr int kRowsPerPhase = 8 / kBits;
  // What row r xors its chunk index with. Indices into a tile are never negative:
  // unsigned arithmetic lets / and % be shifts and masks without signed fix-ups.
  static TEGULA_HOST_DEVICE constexpr unsigned phase(int r) { return (unsigned(r) / kRowsPerPhase) % kBits; }
};

template <int C, int E>
TEGULA_HOST_DEVICE constexpr int swizzle_offset(int r, int c) {
  using S = Swizzle<C, E>;
  const unsigned ur = unsigned(r), uc = unsigned(c);
  return int(ur * C + (((uc / S::kChunk) ^ S::phase(r)) * S::kChunk) + uc % S::kChunk);
}

// wgmma's operand layout (wgmma.h): rows longer than 128 bytes cut into panels 128 bytes
// wide, each panel all of the buffer's rows. Elements per stored row of one panel: the
// whole row up to 128 bytes.
template <int C, int E>
inline constexpr int kPanel = C * E > 128 ? 128 / E : C;

// Element offset of (r, c) in an R x C tile of E-byte elements stored in panels of
// kPanel<C, E> columns, each an R-row tile swizzled as swizzle_offset does.
template <int C, int E, int R>
TEGULA_HOST_DEVICE constexpr int panel_offset(int r, int c) {
  constexpr unsigned P = kPanel<C, E>;
  return int((unsigned(c) / P) * (unsigned(R) * P)) + swizzle_offset<int(P), E>(r, int(unsigned(c) % P));
}

// The address of (r, c) in a tile of C columns stored plainly, swizzled, or (R > 0, rows
// longer than 128 bytes) in panels of R rows, as wgmma operands are: the mma.sync path
// reads a buffer that a wgmma gemm of the same kernel also reads.
template <int C, typename T, bool kSwizzled, int R = 0>
TEGULA_DEVICE const T* tile_at(const T* base, int r, int c) {
  if constexpr (R > 0 && C * int(sizeof(T)) > 128) {
    return base + panel_offset<C, int(sizeof(T)), R>(r, c);
  } else if constexpr (kSwizzled) {
    return base + swizzle_offset<C, int(sizeof(T))>(r, c);
  } else {
    return base + r * C + c;
  }
}

// tile_at for addresses made of a per-thread part and a part the unrolled loops fix:
// row = tr + ur, chunk (16-byte column group) = tc + uc. When ur is a multiple of 8 the
// swizzle phase depends on tr only, and when uc and tc share no set bits (uc + tc =
// uc ^ tc) the swizzled chunk is uc ^ (tc ^ phase): the thread part is computed once, and
// each unrolled access costs one xor with a constant instead of the whole swizzle. The
// phase changes only a chunk's low 3 bits, so in panels the panel is the logical one.
template <int C, typename T, bool kSwizzled, int R = 0>
TEGULA_DEVICE const T* tile_at2(const T* base, int tr, int ur, int tc, int uc) {
  using S = Swizzle<C, int(sizeof(T))>;
  if constexpr (R > 0 && C * int(sizeof(T)) > 128) {
    constexpr int P = kPanel<C, int(sizeof(T))>, PC = P / S::kChunk;
    const int ch = uc ^ (tc ^ int(S::phase(tr)));
    return base + (ch / PC) * (R * P) + (tr + ur) * P + (ch % PC) * S::kChunk;
  } else if constexpr (kSwizzled) {
    return base + (tr + ur) * C + (uc ^ (tc ^ int(S::phase(tr)))) * S::kChunk;
  } else {
    return base + (tr + ur) * C + (tc + uc) * S::kChunk;
  }
}

TEGULA_HOST_DEVICE constexpr bool is_pow2(int v) { return v > 0 && (v & (v - 1)) == 0; }

// Two 16-bit values in one register, `lo` in bits 0..15, and back.
TEGULA_DEVICE uint32_t pack2(half_t lo, half_t hi) {
  return uint32_t(__half_as_ushort(lo)) | (uint32_t(__half_as_ushort(hi)) << 16);
}
TEGULA_DEVICE uint32_t pack2(bfloat16_t lo, bfloat16_t hi) {
  return uint32_t(__bfloat16_as_ushort(lo)) | (uint32_t(__bfloat16_as_ushort(hi)) << 16);
}
TEGULA_DEVICE void unpack2(uint32_t v, half_t& lo, half_t& hi) {
  lo = __ushort_as_half((unsigned short)(v & 0xffffu));
  hi = __ushort_as_half((unsigned short)(v >> 16));
}

// One m16n8k16 (m16n8k32 for 8-bit operands) into the four accumulator slots at C: the
// instruction for the operand types T (A) and U (B) and the accumulator type. kZero: C's
// old value is taken as 0 (the first k-step of a gemm with clear_accum), so no register
// has to be cleared first.
// The tf32 register of a 32-bit operand element: a float rounded as a conversion to
// tfloat32 rounds, a tfloat32 as it is.
TEGULA_DEVICE uint32_t tf32_bits(float x) { return __float_as_uint(tf32_t::from_float(x).value); }
TEGULA_DEVICE uint32_t tf32_bits(tf32_t x) { return __float_as_uint(x.value); }

template <typename T, typename U>
TEGULA_DEVICE void mma_f32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], const float (&c)[4]) {
  if constexpr (sizeof(T) == 4) {
    static_assert(sizeof(U) == 4, "a 32-bit A multiplies a 32-bit B");
    mma_m16n8k8_tf32f32(d, a, b, c);
  } else if constexpr (detail::is_same<T, half_t>) {
    mma_m16n8k16_f16f32(d, a, b, c);
  } else if constexpr (detail::is_same<T, bfloat16_t>) {
    mma_m16n8k16_bf16f32(d, a, b, c);
  } else {
#if TEGULA_ARCH >= 890
    constexpr bool a4 = detail::is_same<T, fp8_e4m3_t>, b4 = detail::is_same<U, fp8_e4m3_t>;
    if constexpr (a4 && b4) {
      mma_m16n8k32_e4m3f32(d, a, b, c);
    } else if constexpr (a4) {
      mma_m16n8k32_e4m3e5m2f32(d, a, b, c);
    } else if constexpr (b4) {
      mma_m16n8k32_e5m2e4m3f32(d, a, b, c);
    } else {
      mma_m16n8k32_e5m2f32(d, a, b, c);
    }
#endif
  }
}
// Integer operands into int32: m16n8k32 for 8-bit ones, m16n8k64 for packed 4-bit ones.
template <typename T, typename U>
TEGULA_DEVICE void mma_s32(int (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], const int (&c)[4]) {
  constexpr bool as = detail::is_same<T, signed char> || detail::is_same<T, int4b_t>;
  constexpr bool bs = detail::is_same<U, signed char> || detail::is_same<U, int4b_t>;
  static_assert(detail::is_int4<T> == detail::is_int4<U>, "integer A and B of one width");
  if constexpr (detail::is_int4<T>) {
    if constexpr (as && bs) {
      mma_m16n8k64_s4s32(d, a, b, c);
    } else if constexpr (as) {
      mma_m16n8k64_s4u4s32(d, a, b, c);
    } else if constexpr (bs) {
      mma_m16n8k64_u4s4s32(d, a, b, c);
    } else {
      mma_m16n8k64_u4s32(d, a, b, c);
    }
  } else if constexpr (as && bs) {
    mma_m16n8k32_s8s32(d, a, b, c);
  } else if constexpr (as) {
    mma_m16n8k32_s8u8s32(d, a, b, c);
  } else if constexpr (bs) {
    mma_m16n8k32_u8s8s32(d, a, b, c);
  } else {
    mma_m16n8k32_u8s32(d, a, b, c);
  }
}
template <bool kZero, typename T, typename U>
TEGULA_DEVICE void mma_tile(int* c, const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  int(&d)[4] = *reinterpret_cast<int(*)[4]>(c);
  if constexpr (kZero) {
    const int zero[4] = {0, 0, 0, 0};
    mma_s32<T, U>(d, a, b, zero);
  } else {
    mma_s32<T, U>(d, a, b, d);
  }
}

// Eight 4-bit elements in one register from two registers of four bytes each: byte j's low
// nibble of lo goes to nibble 2j, of hi to nibble 2j + 1.
TEGULA_DEVICE uint32_t pack_nibbles(uint32_t lo, uint32_t hi) {
  return (lo & 0x0F0F0F0Fu) | ((hi & 0x0F0F0F0Fu) << 4);
}

template <bool kZero, typename T, typename U>
TEGULA_DEVICE void mma_tile(float* c, const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  float(&d)[4] = *reinterpret_cast<float(*)[4]>(c);
  if constexpr (kZero) {
    const float zero[4] = {0.f, 0.f, 0.f, 0.f};
    mma_f32<T, U>(d, a, b, zero);
  } else {
    mma_f32<T, U>(d, a, b, d);
  }
}
// float16 accumulation: slots e = 0,1 (row g) and 2,3 (row g + 8) are the two half2
// registers of the instruction.
template <bool kZero, typename T, typename U>
TEGULA_DEVICE void mma_tile(half_t* c, const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  uint32_t d[2] = {kZero ? 0u : pack2(c[0], c[1]), kZero ? 0u : pack2(c[2], c[3])};
  mma_m16n8k16_f16f16(d, a, b, d);
  unpack2(d[0], c[0], c[1]);
  unpack2(d[1], c[2], c[3]);
}

// The block GEMM, specialised on the tile shape, the warp split and where A lives.
// Warp w owns rows row0 .. row0 + TM and columns col0 .. col0 + TN of C.
template <int M, int N, int K, int WM, int WN, bool TA, bool TB, bool SA, bool SB, bool RA, bool CLEAR,
          typename T, typename U, int LDA_ = 0, int OA = 0, int LDB_ = 0, int OB = 0, int PA = 0, int PB = 0>
struct BlockGemm {
  // KS: elements of K per instruction (32 bytes of a row; 64 packed 4-bit ones, two 8-bit
  // loads, LS apart); CH: elements per 16-byte chunk.
  static constexpr bool I4 = detail::is_int4<T>;
  static constexpr int E = int(sizeof(T)), LS = 32 / E, KS = I4 ? 2 * LS : LS, CH = 16 / E;
  // Stored row lengths of A's and B's buffers.
  static constexpr int LDA = LDA_ ? LDA_ : (TA ? M : K), LDB = LDB_ ? LDB_ : (TB ? K : N);
  static_assert(OA % (TA ? CH : KS) == 0 && OB % (TB ? KS : CH) == 0,
                "a region's column offset is a multiple of the K step (along K) or of a chunk (along M, N)");
  // A in registers: each group of WM warps (one column of the split) holds all of A.
  static_assert(E == 4 || E == 2 || (!TA && TB && !RA && sizeof(U) == 1),
                "8-bit operands are read K-major from shared memory");
  static_assert(E != 4 || sizeof(U) == 4, "32-bit operands: A and B both float32 or tfloat32");
  static_assert(M % (WM * 16) == 0 && N % (WN * 8) == 0 && K % KS == 0, "tile does not fit the mma shape");
  static constexpr int TM = M / WM, TN = N / WN, MT = TM / 16, NT = TN / 8;

  // A fragments of k-step k0 for the warp's MT row tiles. Packed 4-bit: two 8-bit k-steps,
  // rows g and g + 8 of each paired (see the top of this file).
  static TEGULA_DEVICE void load_a(uint32_t (&a)[MT][4], const T* A, int row0, int k0, int lane) {
    if constexpr (I4) {
      uint32_t lo[MT][4], hi[MT][4];
      load_a8(lo, A, row0, k0, lane);
      load_a8(hi, A, row0, k0 + LS, lane);
#pragma unroll
      for (int mi = 0; mi < MT; ++mi) {
        a[mi][0] = pack_nibbles(lo[mi][0], lo[mi][2]);
        a[mi][1] = pack_nibbles(lo[mi][1], lo[mi][3]);
        a[mi][2] = pack_nibbles(hi[mi][0], hi[mi][2]);
        a[mi][3] = pack_nibbles(hi[mi][1], hi[mi][3]);
      }
    } else {
      load_a8(a, A, row0, k0, lane);
    }
  }

  static TEGULA_DEVICE void load_a8(uint32_t (&a)[MT][4], const T* A, int row0, int k0, int lane) {
    if constexpr (E == 4) {
      load_a_tf32(a, A, row0, k0, lane);
    } else {
#pragma unroll
      for (int mi = 0; mi < MT; ++mi) {
        if constexpr (RA) {
          // From registers holding A in the accumulator layout of an M x K tile split WM x 1
          // (slots [mi][kt][e], kt counting 8-column tiles): the 16 x 16 operand is
          // accumulator tile kt = k0 / 8 and its right neighbour.
          const T* s = A + (mi * (K / 8) + k0 / 8) * 4;
          a[mi][0] = pack2(s[0], s[1]);
          a[mi][1] = pack2(s[2], s[3]);
          a[mi][2] = pack2(s[4], s[5]);
          a[mi][3] = pack2(s[6], s[7]);
        } else if constexpr (TA) {
          // A is stored K x M: matrix q = lane / 8 of the four is (m half q % 2, k half q / 2),
          // read transposed from rows k of the stored tile.
          int q = lane / 8;
          if constexpr (is_pow2(2 * MT) && OA == 0) {
            ldmatrix_x4_trans(a[mi], tile_at2<LDA, T, SA, PA>(A, (q / 2) * 8 + lane % 8, k0, row0 / 8 + q % 2, 2 * mi));
          } else {
            ldmatrix_x4_trans(a[mi], tile_at<LDA, T, SA, PA>(A, k0 + (q / 2) * 8 + lane % 8, OA + row0 + mi * 16 + (q % 2) * 8));
          }
        } else {
          // Lanes 0-15 address rows 0-15 at column k0, lanes 16-31 the same rows at k0 + 8.
          ldmatrix_x4(a[mi], tile_at2<LDA, T, SA, PA>(A, row0 + lane % 16, mi * 16, lane / 16, (OA + k0) / CH));
        }
      }
    }
  }

  // 32-bit A (see the top of this file): registers 0..3 are rows g, g + 8 at column 2t,
  // then the same rows at 2t + 1, of row tile mi and k-step k0.
  static TEGULA_DEVICE void load_a_tf32(uint32_t (&a)[MT][4], const T* A, int row0, int k0, int lane) {
    const int g = lane / 4, k = k0 + 2 * (lane % 4);
#pragma unroll
    for (int mi = 0; mi < MT; ++mi) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        T v0, v1;
        if constexpr (RA) {
          // Accumulator slots [mi][kt][e]: e = 0, 1 row g, e = 2, 3 row g + 8; columns 2t, 2t + 1.
          const T* s = A + (mi * (K / 8) + k0 / 8) * 4 + 2 * h;
          v0 = s[0], v1 = s[1];
        } else if constexpr (TA) {
          const int m = OA + row0 + mi * 16 + g + 8 * h;
          v0 = *tile_at<LDA, T, SA, PA>(A, k, m), v1 = *tile_at<LDA, T, SA, PA>(A, k + 1, m);
        } else {
          // Columns 2t and 2t + 1 share a 16-byte chunk, which swizzling keeps whole.
          const T* p = tile_at<LDA, T, SA, PA>(A, row0 + mi * 16 + g + 8 * h, OA + k);
          v0 = p[0], v1 = p[1];
        }
        a[mi][h] = tf32_bits(v0);
        a[mi][2 + h] = tf32_bits(v1);
      }
    }
  }

  // 32-bit B of n-tile ni: rows 2t and 2t + 1 of column g.
  static TEGULA_DEVICE void load_b_tf32(uint32_t (&b)[2], const U* B, int col0, int ni, int k0, int lane) {
    const int n = col0 + ni * 8 + lane / 4, k = k0 + 2 * (lane % 4);
    U v0, v1;
    if constexpr (TB) {
      const U* p = tile_at<LDB, U, SB, PB>(B, n, OB + k);
      v0 = p[0], v1 = p[1];
    } else {
      v0 = *tile_at<LDB, U, SB, PB>(B, k, OB + n), v1 = *tile_at<LDB, U, SB, PB>(B, k + 1, OB + n);
    }
    b[0] = tf32_bits(v0), b[1] = tf32_bits(v1);
  }

  // B fragments of k-step k0 for the warp's NT column tiles: two tiles per ldmatrix.x4.
  static TEGULA_DEVICE void load_b(uint32_t (&b)[NT][2], const U* B, int col0, int k0, int lane) {
    if constexpr (I4) {
      uint32_t lo[NT][2], hi[NT][2];
      load_b8(lo, B, col0, k0, lane);
      load_b8(hi, B, col0, k0 + LS, lane);
#pragma unroll
      for (int ni = 0; ni < NT; ++ni) {
        b[ni][0] = pack_nibbles(lo[ni][0], lo[ni][1]);
        b[ni][1] = pack_nibbles(hi[ni][0], hi[ni][1]);
      }
    } else {
      load_b8(b, B, col0, k0, lane);
    }
  }

  static TEGULA_DEVICE void load_b8(uint32_t (&b)[NT][2], const U* B, int col0, int k0, int lane) {
    if constexpr (E == 4) {
#pragma unroll
      for (int ni = 0; ni < NT; ++ni) load_b_tf32(b[ni], B, col0, ni, k0, lane);
    } else {
      const int q = lane / 8, r = lane % 8;
#pragma unroll
      for (int ni = 0; ni + 1 < NT; ni += 2) {
        uint32_t d[4];
        if constexpr (TB) {
          // B^T rows are B columns: matrices (n half q / 2, k half q % 2), read as stored.
          ldmatrix_x4(d, tile_at2<LDB, U, SB, PB>(B, col0 + (q / 2) * 8 + r, ni * 8, q % 2, (OB + k0) / CH));
        } else if constexpr (is_pow2(NT) && OB == 0) {
          // Rows k of a K x N tile, transposed on the way into registers.
          ldmatrix_x4_trans(d, tile_at2<LDB, U, SB, PB>(B, (q % 2) * 8 + r, k0, col0 / 8 + q / 2, ni));
        } else {
          ldmatrix_x4_trans(d, tile_at<LDB, U, SB, PB>(B, k0 + (q % 2) * 8 + r, OB + col0 + ni * 8 + (q / 2) * 8));
        }
        b[ni][0] = d[0], b[ni][1] = d[1], b[ni + 1][0] = d[2], b[ni + 1][1] = d[3];
      }
      if constexpr (NT % 2 == 1) {
        constexpr int ni = NT - 1;
        if constexpr (TB) {
          ldmatrix_x2(b[ni], tile_at<LDB, U, SB, PB>(B, col0 + ni * 8 + lane % 8, OB + k0 + ((lane / 8) % 2) * CH));
        } else {
          ldmatrix_x2_trans(b[ni], tile_at<LDB, U, SB, PB>(B, k0 + lane % 16, OB + col0 + ni * 8));
        }
      }
    }
  }

  // C += A B over the whole K. Narrow warp tiles double-buffer their fragments: the next
  // k-step's are loaded before this one's mma. Wide ones (attention's P V with N = head
  // dim) would spend too many registers on that, so they stream B two n-tiles at a time
  // and leave the overlap to the instruction scheduler.
  static constexpr bool kDoubleBuffer = (MT * 4 + NT * 2) <= 24;

  // tid: the thread's index among the threads sharing the gemm (threadIdx.x, or its index
  // in a thread scope when the gemm sits under a branch on the thread index).
  template <typename Acc>
  // Unsigned, as threadIdx.x is: signed division would cost registers the wide tiles lack.
  static TEGULA_DEVICE void run(const T* A, const U* B, Acc* C, unsigned tid) {
    const int lane = int(tid % 32u), warp = int(tid / 32u);
    const int row0 = (warp % WM) * TM, col0 = (warp / WM) * TN;
    if constexpr (kDoubleBuffer) {
      uint32_t a[2][MT][4];
      uint32_t b[2][NT][2];
      load_a(a[0], A, row0, 0, lane);
      load_b(b[0], B, col0, 0, lane);
#pragma unroll
      for (int ks = 0; ks < K / KS; ++ks) {
        if (ks + 1 < K / KS) {
          load_a(a[(ks + 1) % 2], A, row0, (ks + 1) * KS, lane);
          load_b(b[(ks + 1) % 2], B, col0, (ks + 1) * KS, lane);
        }
#pragma unroll
        for (int mi = 0; mi < MT; ++mi) {
#pragma unroll
          for (int ni = 0; ni < NT; ++ni) {
            // Serpentine over n so consecutive mma share the A or B registers.
            int nj = (mi % 2) ? NT - 1 - ni : ni;
            if (CLEAR && ks == 0) {
              mma_tile<true, T, U>(&C[(mi * NT + nj) * 4], a[ks % 2][mi], b[ks % 2][nj]);
            } else {
              mma_tile<false, T, U>(&C[(mi * NT + nj) * 4], a[ks % 2][mi], b[ks % 2][nj]);
            }
          }
        }
      }
    } else {
#pragma unroll
      for (int ks = 0; ks < K / KS; ++ks) {
        uint32_t a[MT][4];
        load_a(a, A, row0, ks * KS, lane);
#pragma unroll
        for (int n0 = 0; n0 < NT; n0 += 2) {
          uint32_t b[2][2];
          load_b_pair(b, B, col0, n0, ks * KS, lane, n0 + 1 < NT);
#pragma unroll
          for (int mi = 0; mi < MT; ++mi) {
            if (CLEAR && ks == 0) {
              mma_tile<true, T, U>(&C[(mi * NT + n0) * 4], a[mi], b[0]);
              if (n0 + 1 < NT) mma_tile<true, T, U>(&C[(mi * NT + n0 + 1) * 4], a[mi], b[1]);
            } else {
              mma_tile<false, T, U>(&C[(mi * NT + n0) * 4], a[mi], b[0]);
              if (n0 + 1 < NT) mma_tile<false, T, U>(&C[(mi * NT + n0 + 1) * 4], a[mi], b[1]);
            }
          }
        }
      }
    }
  }

  // B fragments of n-tiles n0 and n0 + 1 (only n0 when !two) of the warp's columns.
  static TEGULA_DEVICE void load_b_pair(uint32_t (&b)[2][2], const U* B, int col0, int n0, int k0, int lane,
                                        bool two) {
    if constexpr (E == 4) {
      load_b_tf32(b[0], B, col0, n0, k0, lane);
      if (two) load_b_tf32(b[1], B, col0, n0 + 1, k0, lane);
    } else if constexpr (I4) {
      uint32_t lo[2][2], hi[2][2];
      load_b_pair16(lo, B, col0, n0, k0, lane, two);
      load_b_pair16(hi, B, col0, n0, k0 + LS, lane, two);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        b[i][0] = pack_nibbles(lo[i][0], lo[i][1]);
        b[i][1] = pack_nibbles(hi[i][0], hi[i][1]);
      }
    } else {
      load_b_pair16(b, B, col0, n0, k0, lane, two);
    }
  }

  static TEGULA_DEVICE void load_b_pair16(uint32_t (&b)[2][2], const U* B, int col0, int n0, int k0, int lane,
                                          bool two) {
    const int q = lane / 8, r = lane % 8;
    if (two) {
      uint32_t d[4];
      if constexpr (TB) {
        ldmatrix_x4(d, tile_at2<LDB, U, SB, PB>(B, col0 + (q / 2) * 8 + r, n0 * 8, q % 2, (OB + k0) / CH));
      } else if constexpr (is_pow2(NT) && OB == 0) {
        ldmatrix_x4_trans(d, tile_at2<LDB, U, SB, PB>(B, (q % 2) * 8 + r, k0, col0 / 8 + q / 2, n0));
      } else {
        ldmatrix_x4_trans(d, tile_at<LDB, U, SB, PB>(B, k0 + (q % 2) * 8 + r, OB + col0 + n0 * 8 + (q / 2) * 8));
      }
      b[0][0] = d[0], b[0][1] = d[1], b[1][0] = d[2], b[1][1] = d[3];
    } else if constexpr (TB) {
      ldmatrix_x2(b[0], tile_at<LDB, U, SB, PB>(B, col0 + n0 * 8 + lane % 8, OB + k0 + ((lane / 8) % 2) * CH));
    } else {
      ldmatrix_x2_trans(b[0], tile_at<LDB, U, SB, PB>(B, k0 + lane % 16, OB + col0 + n0 * 8));
    }
  }
};

// T.gemm(A_shared, B_shared, C): A and B in shared memory. CLEAR: C = A B (clear_accum).
// LDA, OA, LDB, OB: operands that are regions of their buffers (see the top of this file);
// PA / PB: the stored rows of an operand kept in wgmma's panels (0: not panelled).
template <int M, int N, int K, int WM, int WN, bool TA, bool TB, bool CLEAR, bool SA, bool SB, int LDA = 0,
          int OA = 0, int LDB = 0, int OB = 0, int PA = 0, int PB = 0, typename T, typename U, typename Acc>
TEGULA_DEVICE void gemm_ss(const T* A, const U* B, Acc* C, unsigned tid = threadIdx.x) {
  BlockGemm<M, N, K, WM, WN, TA, TB, SA, SB, false, CLEAR, T, U, LDA, OA, LDB, OB, PA, PB>::run(A, B, C, tid);
}

// T.gemm(A_fragment, B_shared, C): A in registers, in the layout of an accumulator of the
// same warp split with WN = 1, held by each of the WN columns of warps (what
// T.copy(acc_fp32, acc_fp16) of a previous gemm's
// accumulator gives), so attention's P @ V reads P where the first gemm left it. With TA
// (A stored K x M) the registers hold Aᵀ in that order (the compiler's layout is the
// transposed one), so they are read the same way.
template <int M, int N, int K, int WM, int WN, bool TA, bool TB, bool CLEAR, bool SA, bool SB, int LDA = 0,
          int OA = 0, int LDB = 0, int OB = 0, int PA = 0, int PB = 0, typename T, typename U, typename Acc>
TEGULA_DEVICE void gemm_rs(const T* A, const U* B, Acc* C, unsigned tid = threadIdx.x) {
  BlockGemm<M, N, K, WM, WN, TA, TB, SA, SB, true, CLEAR, T, U, LDA, OA, LDB, OB, 0, PB>::run(A, B, C, tid);
}

}  // namespace tegula
