// Block-level GEMM on Hopper's warpgroup tensor-core instruction (wgmma m64nNk16, sm_90a),
// the code T.gemm lowers to there: wgmma_ss when A is in shared memory, wgmma_rs when A
// is a fragment.
//
// The block's warpgroups (4 warps each) tile the M x N output as WGM x WGN; warpgroup g
// takes the tile at (g % WGM, g / WGM), made of TM / 64 instructions of m64nTNk16 per
// k-step. Each warp of a warpgroup holds 16 rows of each 64-row tile, in the register
// order of an mma.sync accumulator ([mi][ni][e], see gemm.h): the compiler's layout for C
// (layout/mma.cc, group 4) is this order.
//
// Shared operands are stored as the hardware's canonical swizzled layouts, read by the
// instruction itself through a 64-bit descriptor: rows of 32, 64 or 128 bytes with their
// 16-byte chunks XOR-swizzled by row (swizzle_offset, which is what the 32/64/128-byte
// swizzle modes compute from address bits, so buffers are 1024-byte aligned), and longer
// rows cut into 128-byte-wide panels, each panel all of the buffer's rows
// (panel_offset). An operand whose contiguous dimension is K (A as M x K, B as N x K) is
// "K-major"; one stored K x M or K x N is "MN-major" and set as transposed in the
// instruction.
//
// A shared operand may be a region of a larger buffer, as for gemm.h: LDA / LDB are the
// stored row lengths (0: the operand's own width), OA / OB the column of the region's
// first element (its row is in the pointer, a multiple of 8: whole swizzle atoms). A
// descriptor may start inside a swizzle row only in K steps of a K-major operand, so a
// column offset along K is a multiple of the K step, and one along M or N (an MN-major
// operand) starts a panel; the compiler falls back to mma.sync for a region that is not.
//
// The instruction is a struct the code generator writes for the tile's N and element types
// (`Inst`): its asm names N / 2 accumulator registers, which no template can spell.
//
// 8-bit float operands (A of type T, B of type U, e4m3 or e5m2 each) run m64nNk32: a
// k-step is 32 bytes of a row, as for 16-bit m64nNk16, so the layouts and descriptors are
// the same in bytes. The instruction has no transpose for them: A is K-major in shared
// memory and B is N x K (TB). 8-bit integer operands (int8 / uint8, either of each) run
// m64nNk32 .s32 the same way, into int32 accumulators (the instruction struct then names
// integer registers); the instruction has no packed 4-bit form.
#pragma once
#include "tegula/gemm.h"

namespace tegula {

#if TEGULA_ARCH >= 900

// __syncthreads that also orders this thread's generic-proxy writes to shared memory
// (stores, completed cp.async) before the wgmma reads after it: kernels that use wgmma
// print every barrier as this one.
TEGULA_DEVICE void sync_async_proxy() {
  fence_proxy_async();
  __syncthreads();
}

TEGULA_DEVICE void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
TEGULA_DEVICE void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
TEGULA_DEVICE void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Pins accumulator registers in place: the compiler may not move their reads or writes
// across this point (wgmma writes them asynchronously, between issue and wait).
template <int N>
TEGULA_DEVICE void fence_registers(float* d) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int N>
TEGULA_DEVICE void fence_registers(int* d) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

// Byte offset of the unswizzled position (r, c) in a panel_offset<C, E, R> tile: what a
// descriptor's start address names (the hardware applies the swizzle).
template <int C, int E, int R>
TEGULA_HOST_DEVICE constexpr uint32_t panel_byte(int r, int c) {
  constexpr int P = kPanel<C, E>;
  return uint32_t(((c / P) * R * P + r * P + c % P) * E);
}

// A shared-memory matrix descriptor: start address, leading and stride byte offsets (in
// 16-byte units) and the swizzle mode of rows of P elements (128 B: 1, 64 B: 2, 32 B: 3).
// The stride offset is always 8 rows of a panel; the leading offset is the distance
// between panels, which only MN-major operands use.
template <int P, int E>
TEGULA_DEVICE uint64_t wgmma_desc(uint32_t addr, uint32_t lead) {
  constexpr int row = P * E;
  static_assert(row == 32 || row == 64 || row == 128, "wgmma operand rows must be 32, 64 or 128 bytes");
  constexpr uint64_t mode = row == 128 ? 1 : row == 64 ? 2 : 3;
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t((lead >> 4) & 0x3FFF) << 16) |
         (uint64_t(((8 * row) >> 4) & 0x3FFF) << 32) | (mode << 62);
}

template <int M, int N, int K, int WGM, int WGN, bool TA, bool TB, bool CLEAR, int RA, int RB, typename T,
          typename U, typename Inst, int LDA = 0, int OA = 0, int LDB = 0, int OB = 0>
struct BlockWgmma {
  static constexpr int E = int(sizeof(T));
  static constexpr int KS = 32 / E;  // elements of K per instruction
  static constexpr int TM = M / WGM, TN = N / WGN, MI = TM / 64;
  static constexpr int CA = LDA ? LDA : TA ? M : K, CB = LDB ? LDB : TB ? K : N;  // stored row lengths
  static_assert(OA % (TA ? kPanel<CA, E> : KS) == 0 && OB % (TB ? KS : kPanel<CB, E>) == 0,
                "a region's column offset is a multiple of the K step (K-major) or of a panel (MN-major)");
  static_assert(sizeof(U) == sizeof(T), "A and B of one width");
  static_assert(E == 2 || (!TA && TB), "8-bit operands are read K-major");
  static_assert(M % (WGM * 64) == 0 && N % WGN == 0 && TN % 8 == 0 && TN <= 256 && K % KS == 0,
                "tile does not fit the wgmma shape");
  static_assert(Inst::N == TN, "instruction width does not match the warpgroup tile");

  // Descriptor of A's 64 x KS tile at (m0, k0), and of B's TN x KS tile at (n0, k0).
  static TEGULA_DEVICE uint64_t desc_a(uint32_t base, int m0, int k0) {
    constexpr int P = kPanel<CA, E>;
    if constexpr (TA) {
      return wgmma_desc<P, E>(base + panel_byte<CA, E, RA>(k0, OA + m0), RA * P * E);
    } else {
      return wgmma_desc<P, E>(base + panel_byte<CA, E, RA>(m0, OA + k0), 16);
    }
  }
  static TEGULA_DEVICE uint64_t desc_b(uint32_t base, int n0, int k0) {
    constexpr int P = kPanel<CB, E>;
    if constexpr (TB) {
      return wgmma_desc<P, E>(base + panel_byte<CB, E, RB>(n0, OB + k0), 16);
    } else {
      return wgmma_desc<P, E>(base + panel_byte<CB, E, RB>(k0, OB + n0), RB * P * E);
    }
  }

  // Bytes from the k0 = 0 tile to the k0 one, the same wherever the tile starts (m0, n0):
  // each K step's descriptor is the first one's plus this / 16. Its start-address field
  // takes the sum as is: shared addresses stay below 2^18, so the 14-bit field never
  // carries into the next.
  static TEGULA_HOST_DEVICE constexpr uint32_t step_a(int k0) {
    return TA ? panel_byte<CA, E, RA>(k0, OA) - panel_byte<CA, E, RA>(0, OA)
              : panel_byte<CA, E, RA>(0, OA + k0) - panel_byte<CA, E, RA>(0, OA);
  }
  static TEGULA_HOST_DEVICE constexpr uint32_t step_b(int k0) {
    return TB ? panel_byte<CB, E, RB>(0, OB + k0) - panel_byte<CB, E, RB>(0, OB)
              : panel_byte<CB, E, RB>(k0, OB) - panel_byte<CB, E, RB>(0, OB);
  }

  // Issues C (+)= A B over the whole K as one wgmma group. Until wgmma_wait_regs returns,
  // neither C nor the operands may be touched. The descriptors are made once and stepped
  // along K by constants (a handful of instructions per group, not per instruction).
  // held: where A's packed registers live (a buffer of the caller's, pinned until its
  // wait: wgmma_rs_held); null: registers of this call.
  template <bool kRegsA, typename Acc>
  static TEGULA_DEVICE void run(const T* A, const U* B, Acc* C, uint32_t* held = nullptr) {
    // The warpgroup index, read from lane 0 so the assembler knows it is the same in every
    // thread of the warp: the tile offsets and descriptors below then live in uniform
    // registers instead of being moved into them before every wgmma (wgmma is .aligned,
    // so the whole warp is here).
    const int group = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0);
    const int m0 = (group % WGM) * TM, n0 = (group / WGM) * TN;
    const uint32_t a = kRegsA ? 0u : smem_addr(A), b = smem_addr(B);
    // A in registers: every 16-bit pair packed and pinned before the fence, so that no
    // register is defined between the instructions of the group (the assembler would then
    // make each instruction wait for the one before).
    uint32_t own[kRegsA ? MI : 1][kRegsA ? K / KS : 1][4];
    auto ra = held ? reinterpret_cast<uint32_t(*)[kRegsA ? K / KS : 1][4]>(held) : own;
    if constexpr (kRegsA) {
      static_assert(E == 2, "8-bit A is read from shared memory");
#pragma unroll
      for (int ks = 0; ks < K / KS; ++ks) {
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
          // A's registers in the accumulator layout of an M x K tile (group 4): the 16 x 16
          // operand of m-tile mi is accumulator tiles kt = 2 ks and 2 ks + 1.
          const T* s = A + (mi * (K / 8) + ks * 2) * 4;
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            ra[mi][ks][j] = pack2(s[2 * j], s[2 * j + 1]);
            asm volatile("" : "+r"(ra[mi][ks][j]));
          }
        }
      }
    }
    const uint64_t db0 = desc_b(b, n0, 0);
    uint64_t da0[MI];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) da0[mi] = kRegsA ? 0 : desc_a(a, m0 + mi * 64, 0);
    fence_registers<MI * TN / 2>(C);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < K / KS; ++ks) {
      const uint64_t db = db0 + (step_b(ks * KS) >> 4);
      const int scale = (CLEAR && ks == 0) ? 0 : 1;
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        Acc* d = C + mi * (TN / 2);
        if constexpr (kRegsA) {
          Inst::template rs<!TB>(d, ra[mi][ks], db, scale);
        } else {
          Inst::template ss<TA, !TB>(d, da0[mi] + (step_a(ks * KS) >> 4), db, scale);
        }
      }
    }
    wgmma_commit();
  }
};

// Waits until at most `Pending` of the wgmma groups this thread issued are still running
// (0: all have landed); C's N registers are their accumulators.
template <int Pending, int N, typename Acc>
TEGULA_DEVICE void wgmma_wait_regs(Acc* C) {
  wgmma_wait<Pending>();
  fence_registers<N>(C);
}

// The same, where A's packed registers (H words at `held`) stay pinned too: the wait of a
// wgmma_rs_held, which reads them until the group lands.
template <int Pending, int N, int H, typename Acc>
TEGULA_DEVICE void wgmma_wait_held(Acc* C, uint32_t* held) {
  wgmma_wait<Pending>();
  fence_registers<N>(C);
#pragma unroll
  for (int i = 0; i < H; ++i) asm volatile("" : "+r"(held[i])::"memory");
}

// T.gemm(A_shared, B_shared, C) on wgmma, issued (wgmma_wait_regs completes it). RA, RB:
// rows of A's and B's buffers as stored; LDA, OA, LDB, OB: operands that are regions.
template <int M, int N, int K, int WGM, int WGN, bool TA, bool TB, bool CLEAR, int RA, int RB, typename Inst,
          int LDA = 0, int OA = 0, int LDB = 0, int OB = 0, typename T, typename U, typename Acc>
TEGULA_DEVICE void wgmma_ss(const T* A, const U* B, Acc* C) {
  BlockWgmma<M, N, K, WGM, WGN, TA, TB, CLEAR, RA, RB, T, U, Inst, LDA, OA, LDB, OB>::template run<false>(A, B, C);
}

// T.gemm(A_fragment, B_shared, C) on wgmma: A in the registers of an accumulator of the same
// warpgroup split (WGN = 1), as T.copy(acc_fp32, acc_fp16) of a previous gemm's leaves it;
// with the columns split too (WGN > 1), each column of warpgroups holds its own copy.
template <int M, int N, int K, int WGM, int WGN, bool TA, bool TB, bool CLEAR, int RA, int RB, typename Inst,
          int LDA = 0, int OA = 0, int LDB = 0, int OB = 0, typename T>
TEGULA_DEVICE void wgmma_rs(const T* A, const T* B, float* C) {
  static_assert(!TA, "A in registers takes no transpose");
  BlockWgmma<M, N, K, WGM, WGN, TA, TB, CLEAR, RA, RB, T, T, Inst, LDA, OA, LDB, OB>::template run<true>(A, B, C);
}

// wgmma_rs whose wait comes later (gemm_waits.cc): A is packed into `held`, which the
// caller keeps, and wgmma_wait_held pins, until the group lands.
template <int M, int N, int K, int WGM, int WGN, bool TA, bool TB, bool CLEAR, int RA, int RB, typename Inst,
          int LDA = 0, int OA = 0, int LDB = 0, int OB = 0, typename T>
TEGULA_DEVICE void wgmma_rs_held(const T* A, const T* B, float* C, uint32_t* held) {
  static_assert(!TA, "A in registers takes no transpose");
  BlockWgmma<M, N, K, WGM, WGN, TA, TB, CLEAR, RA, RB, T, T, Inst, LDA, OA, LDB, OB>::template run<true>(A, B, C,
                                                                                                    held);
}

#endif  // TEGULA_ARCH >= 900

}  // namespace tegula
