// Bulk tensor copies (the copy engine, TMA) and the mbarrier pipeline of a
// warp-specialised kernel (sm_90a): what transform/warp_specialize.cc prints.
//
// A tensor map (128 bytes, encoded on the host by cuTensorMapEncodeTiled from the call's
// tensor) describes a global tensor, the box one copy moves and the swizzle it stores the
// box with in shared memory. It reaches the kernel as a __grid_constant__ parameter; its
// generic address is what cp.async.bulk.tensor names. The copy lands the box row-major in
// shared memory (innermost dimension fastest), swizzled as the map says, fills with zero
// what lies outside the tensor, and when its bytes have landed counts them on an mbarrier.
//
// Pipeline: per stage, a "full" barrier the producer arms with the bytes it expects
// (mbar_arrive_expect_tx) and the copies complete, and an "empty" barrier every consumer
// thread arrives on when it is done with the stage. Waits name the phase parity to wait
// for; a fresh barrier counts its (never run) previous phase, parity 1, as complete.
#pragma once

#include "tegula/async.h"

namespace tegula {

struct alignas(64) TensorMap {
  unsigned long long words[16];
};

#if TEGULA_ARCH >= 900

TEGULA_DEVICE void mbar_init(void* bar, int count) { mbarrier_init(static_cast<uint64_t*>(bar), count); }
TEGULA_DEVICE void mbar_wait(void* bar, int parity) { mbarrier_wait(static_cast<uint64_t*>(bar), parity); }
TEGULA_DEVICE void mbar_arrive(void* bar) { mbarrier_arrive(static_cast<uint64_t*>(bar)); }
// One arrival on bar once all of this thread's earlier cp.async copies have landed
// (T.cp_async_barrier_noinc): the arrival counts toward the barrier's expected count.
TEGULA_DEVICE void mbar_cp_async_arrive_noinc(void* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
TEGULA_DEVICE void mbar_arrive_expect_tx(void* bar, int bytes) {
  mbarrier_arrive_expect_tx(static_cast<uint64_t*>(bar), uint32_t(bytes));
}

// Registers per thread of the calling warpgroup: the producer gives its registers back,
// the consumers take them (every warp of the warpgroup executes the same one).
template <int N>
TEGULA_DEVICE void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
TEGULA_DEVICE void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

TEGULA_DEVICE uint64_t tmap_addr(const TensorMap* map) { return reinterpret_cast<uint64_t>(map); }

TEGULA_DEVICE void tma_load_1d(void* smem, const TensorMap* map, void* bar, int c0) {
  asm volatile(
      "cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3}], [%2];\n" ::"r"(
          smem_addr(smem)),
      "l"(tmap_addr(map)), "r"(smem_addr(bar)), "r"(c0)
      : "memory");
}
TEGULA_DEVICE void tma_load_2d(void* smem, const TensorMap* map, void* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
          smem_addr(smem)),
      "l"(tmap_addr(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
      : "memory");
}
TEGULA_DEVICE void tma_load_3d(void* smem, const TensorMap* map, void* bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
      "[%2];\n" ::"r"(smem_addr(smem)),
      "l"(tmap_addr(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
TEGULA_DEVICE void tma_load_4d(void* smem, const TensorMap* map, void* bar, int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
      "[%2];\n" ::"r"(smem_addr(smem)),
      "l"(tmap_addr(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
TEGULA_DEVICE void tma_load_5d(void* smem, const TensorMap* map, void* bar, int c0, int c1, int c2, int c3, int c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6, "
      "%7}], [%2];\n" ::"r"(smem_addr(smem)),
      "l"(tmap_addr(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}

#endif  // TEGULA_ARCH >= 900

}  // namespace tegula
