// Warp-level tensor-core instructions (sm_80+): ldmatrix to fill fragments from
// shared memory, mma.sync to multiply them, and packing helpers for the epilogue.
//
// Fragments are uint32_t registers each holding two 16-bit values (four 8-bit ones),
// in the per-lane order the PTX ISA gives. For m16n8k16 with 16-bit A, lane l holds
// rows l/4 and l/4 + 8, columns 2*(l%4) + {0, 1} and the same plus 8: a[0] row l/4,
// a[1] row l/4 + 8, a[2] row l/4 at k + 8, a[3] row l/4 + 8 at k + 8.
// The layout pass chooses the shared-memory addresses so each lane's ldmatrix row
// lands exactly there; these functions add nothing beyond the instruction.
#pragma once

#include "tegula/config.h"

namespace tegula {

// ldmatrix: each of the 1, 2 or 4 8x8 matrices takes its 8 row addresses from lanes
// 8m .. 8m+7 (16 bytes per row, 16-byte aligned); only lanes [0, 8 * count) matter.
// _trans delivers each matrix transposed, which turns a k-major B tile into the "col"
// operand mma wants without a shuffle.
TEGULA_DEVICE void ldmatrix_x1(uint32_t (&d)[1], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n"
               : "=r"(d[0])
               : "r"(smem_addr(smem)));
}
TEGULA_DEVICE void ldmatrix_x2(uint32_t (&d)[2], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(d[0]), "=r"(d[1])
               : "r"(smem_addr(smem)));
}
TEGULA_DEVICE void ldmatrix_x4(uint32_t (&d)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
               : "r"(smem_addr(smem)));
}
TEGULA_DEVICE void ldmatrix_x1_trans(uint32_t (&d)[1], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
               : "=r"(d[0])
               : "r"(smem_addr(smem)));
}
TEGULA_DEVICE void ldmatrix_x2_trans(uint32_t (&d)[2], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(d[0]), "=r"(d[1])
               : "r"(smem_addr(smem)));
}
TEGULA_DEVICE void ldmatrix_x4_trans(uint32_t (&d)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
               : "r"(smem_addr(smem)));
}

// D = A * B + C for one m16n8 tile; d may be the same array as c.
// A is row-major 16xK, B is "col" (K-major) Kx8, the instruction's only layout pair
// for 16-bit inputs. Name: <input type><accumulator type>.
#define TEGULA_MMA_F32_ACC(name, shape, in_type, a_regs) TEGULA_MMA_F32_ACC2(name, shape, in_type, in_type, a_regs)
#define TEGULA_MMA_F32_ACC2(name, shape, a_type, b_type, a_regs)                         \
  TEGULA_DEVICE void name(float(&d)[4], const uint32_t(&a)[a_regs], const uint32_t(&b)[2], \
                          const float(&c)[4]) {                                          \
    asm("mma.sync.aligned." shape ".row.col.f32." a_type "." b_type ".f32 "                \
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"          \
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])                                 \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]),   \
          "f"(c[1]), "f"(c[2]), "f"(c[3]));                                               \
  }
TEGULA_MMA_F32_ACC(mma_m16n8k16_f16f32, "m16n8k16", "f16", 4)
TEGULA_MMA_F32_ACC(mma_m16n8k16_bf16f32, "m16n8k16", "bf16", 4)
// float32 inputs run as tf32 (10-bit mantissa); each register holds one element.
TEGULA_MMA_F32_ACC(mma_m16n8k8_tf32f32, "m16n8k8", "tf32", 4)
#if TEGULA_ARCH >= 890
// 8-bit floats, sm_89+: each register holds four elements, A's and B's types either.
TEGULA_MMA_F32_ACC(mma_m16n8k32_e4m3f32, "m16n8k32", "e4m3", 4)
TEGULA_MMA_F32_ACC(mma_m16n8k32_e5m2f32, "m16n8k32", "e5m2", 4)
TEGULA_MMA_F32_ACC2(mma_m16n8k32_e4m3e5m2f32, "m16n8k32", "e4m3", "e5m2", 4)
TEGULA_MMA_F32_ACC2(mma_m16n8k32_e5m2e4m3f32, "m16n8k32", "e5m2", "e4m3", 4)
#endif
#undef TEGULA_MMA_F32_ACC
#undef TEGULA_MMA_F32_ACC2

// Half accumulators: c and d are two registers of packed half2 (rows r and r + 8).
TEGULA_DEVICE void mma_m16n8k16_f16f16(uint32_t (&d)[2], const uint32_t (&a)[4],
                                       const uint32_t (&b)[2], const uint32_t (&c)[2]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 "
      "{%0, %1}, {%2, %3, %4, %5}, {%6, %7}, {%8, %9};\n"
      : "=r"(d[0]), "=r"(d[1])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c[0]), "r"(c[1]));
}

// Sparse A (mma.sp m16n8k32, sm_80+): a holds the kept half of a 16 x 32 tile of A, in
// the registers a dense 16 x 16 A takes; b the 32 x 8 tile of B (two k16 fragments); e
// the metadata register (gemm_sp.h), read from lanes 4g and 4g + 1 (sparsity selector 0).
// With ::ordered_metadata (PTX 8.5, CUDA 12.5 on) each group's two positions must come in
// increasing order, as compressors write them.
#if defined(__CUDACC_VER_MAJOR__) && (__CUDACC_VER_MAJOR__ > 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 5))
#define TEGULA_MMA_SP "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col."
#else
#define TEGULA_MMA_SP "mma.sp.sync.aligned.m16n8k32.row.col."
#endif
#define TEGULA_MMA_SP_F32_ACC(name, in_type)                                                            \
  TEGULA_DEVICE void name(float(&d)[4], const uint32_t(&a)[4], const uint32_t(&b)[4], const float(&c)[4], \
                          uint32_t e) {                                                                 \
    asm(TEGULA_MMA_SP "f32." in_type "." in_type ".f32 "                                                  \
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9, %10, %11}, {%12, %13, %14, %15}, %16, 0x0;\n"   \
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])                                                \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]),       \
          "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]), "r"(e));                                          \
  }
TEGULA_MMA_SP_F32_ACC(mma_sp_m16n8k32_f16f32, "f16")
TEGULA_MMA_SP_F32_ACC(mma_sp_m16n8k32_bf16f32, "bf16")
#undef TEGULA_MMA_SP_F32_ACC
TEGULA_DEVICE void mma_sp_m16n8k32_f16f16(uint32_t (&d)[2], const uint32_t (&a)[4], const uint32_t (&b)[4],
                                          const uint32_t (&c)[2], uint32_t e) {
  asm(TEGULA_MMA_SP "f16.f16.f16.f16 {%0, %1}, {%2, %3, %4, %5}, {%6, %7, %8, %9}, {%10, %11}, %12, 0x0;\n"
      : "=r"(d[0]), "=r"(d[1])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(c[0]),
        "r"(c[1]), "r"(e));
}
#undef TEGULA_MMA_SP

// Integer operands into int32, wrapping on overflow (no .satfinite), as torch's int
// matmul does; A's and B's types either, signed or unsigned. 8-bit (m16n8k32): each
// register holds four elements, in the places 8-bit floats take. Packed 4-bit
// (m16n8k64): each register holds eight, a nibble each (gemm.h says which of K).
#define TEGULA_MMA_S32_ACC(name, shape, a_type, b_type)                                         \
  TEGULA_DEVICE void name(int(&d)[4], const uint32_t(&a)[4], const uint32_t(&b)[2], const int(&c)[4]) { \
    asm("mma.sync.aligned." shape ".row.col.s32." a_type "." b_type ".s32 "                     \
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"               \
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])                                      \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c[0]), "r"(c[1]), \
          "r"(c[2]), "r"(c[3]));                                                              \
  }
TEGULA_MMA_S32_ACC(mma_m16n8k32_s8s32, "m16n8k32", "s8", "s8")
TEGULA_MMA_S32_ACC(mma_m16n8k32_u8s32, "m16n8k32", "u8", "u8")
TEGULA_MMA_S32_ACC(mma_m16n8k32_s8u8s32, "m16n8k32", "s8", "u8")
TEGULA_MMA_S32_ACC(mma_m16n8k32_u8s8s32, "m16n8k32", "u8", "s8")
TEGULA_MMA_S32_ACC(mma_m16n8k64_s4s32, "m16n8k64", "s4", "s4")
TEGULA_MMA_S32_ACC(mma_m16n8k64_u4s32, "m16n8k64", "u4", "u4")
TEGULA_MMA_S32_ACC(mma_m16n8k64_s4u4s32, "m16n8k64", "s4", "u4")
TEGULA_MMA_S32_ACC(mma_m16n8k64_u4s4s32, "m16n8k64", "u4", "s4")
#undef TEGULA_MMA_S32_ACC

// Two floats rounded into one register, `lo` in bits 0..15: how an f32 accumulator
// becomes the 16-bit A operand of the next mma (the P @ V step of attention).
TEGULA_DEVICE uint32_t pack_f16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
TEGULA_DEVICE uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
// float -> tf32 operand, rounded to nearest (the mma itself would just drop the bits).
TEGULA_DEVICE uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

#if TEGULA_ARCH >= 900
// stmatrix (sm_90+), the inverse of ldmatrix: lanes 8m .. 8m+7 give the row addresses
// of matrix m, and each lane's registers are written where ldmatrix would read them.
TEGULA_DEVICE void stmatrix_x2(void* smem, const uint32_t (&s)[2]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x2.shared.b16 [%0], {%1, %2};\n" ::"r"(smem_addr(smem)),
               "r"(s[0]), "r"(s[1])
               : "memory");
}
TEGULA_DEVICE void stmatrix_x4(void* smem, const uint32_t (&s)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(
                   smem_addr(smem)),
               "r"(s[0]), "r"(s[1]), "r"(s[2]), "r"(s[3])
               : "memory");
}
TEGULA_DEVICE void stmatrix_x2_trans(void* smem, const uint32_t (&s)[2]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%0], {%1, %2};\n" ::"r"(
                   smem_addr(smem)),
               "r"(s[0]), "r"(s[1])
               : "memory");
}
TEGULA_DEVICE void stmatrix_x4_trans(void* smem, const uint32_t (&s)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(
                   smem_addr(smem)),
               "r"(s[0]), "r"(s[1]), "r"(s[2]), "r"(s[3])
               : "memory");
}
#endif

}  // namespace tegula
