// Asynchronous copies global -> shared and the barriers that order them.
//
// sm_80 path (T.Pipelined with cp.async): each thread issues cp_async_* for its part of
// a stage, cp_async_commit() closes the stage as one group, and cp_async_wait<N>()
// before a stage is read waits until at most N newer groups are still in flight; then
// __syncthreads() makes every thread's copies visible to all.
//   stage 0: copies, commit | stage 1: copies, commit | wait<1> -> stage 0 has landed
//
// sm_90 path (bulk copies): completion is counted in bytes on an mbarrier in shared
// memory. Those helpers only exist when compiling for sm_90 or newer.
#pragma once

#include "tegula/config.h"

namespace tegula {

// 16 bytes, cached in L2 only (.cg): tiles are read once per block, L1 would only evict.
// Both addresses 16-byte aligned.
TEGULA_DEVICE void cp_async_16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem)), "l"(gmem));
}

// With pred false nothing is read (gmem may point past the tensor) and the 16 bytes of
// smem are zero-filled: the src-size operand is 0, the copy size stays 16.
TEGULA_DEVICE void cp_async_16_pred(void* smem, const void* gmem, bool pred) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)),
               "l"(gmem), "r"(pred ? 16 : 0));
}

// 8 and 4 bytes: .cg only allows 16, so these go through L1 (.ca).
TEGULA_DEVICE void cp_async_8(void* smem, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(smem_addr(smem)), "l"(gmem));
}
TEGULA_DEVICE void cp_async_8_pred(void* smem, const void* gmem, bool pred) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(smem_addr(smem)),
               "l"(gmem), "r"(pred ? 8 : 0));
}
TEGULA_DEVICE void cp_async_4(void* smem, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(smem)), "l"(gmem));
}
TEGULA_DEVICE void cp_async_4_pred(void* smem, const void* gmem, bool pred) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(smem)),
               "l"(gmem), "r"(pred ? 4 : 0));
}

TEGULA_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// The "memory" clobber keeps the compiler from hoisting shared-memory reads above it.
template <int N>
TEGULA_DEVICE void cp_async_wait() {
  static_assert(N >= 0, "cp_async_wait<N>: N counts groups still in flight");
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
TEGULA_DEVICE void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// Named barriers, for producer/consumer warp groups that must not stall the whole
// block: `num_threads` (a multiple of 32) threads meet at barrier `id` (1..15; 0 is the
// one __syncthreads uses). arrive signals without waiting, as a producer does.
TEGULA_DEVICE void barrier_sync(int id, int num_threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(num_threads) : "memory");
}
TEGULA_DEVICE void barrier_arrive(int id, int num_threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(num_threads) : "memory");
}

#if TEGULA_ARCH >= 900

// Orders this thread's generic-proxy writes to shared memory (ordinary stores) before
// later async-proxy operations on it (bulk copies out of shared memory, wgmma reads).
TEGULA_DEVICE void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// An mbarrier is one 8-byte word of shared memory. A phase completes when `count`
// threads have arrived and every byte announced with expect_tx has landed; the phase
// parity then flips, which is what mbarrier_wait(parity) watches.
TEGULA_DEVICE void mbarrier_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count)
               : "memory");
}

// Makes the initialised barrier visible to the async proxy (and to the cluster);
// one thread calls it after mbarrier_init, before the block-wide sync.
TEGULA_DEVICE void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

TEGULA_DEVICE void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}

// Arrive once and announce `bytes` more of transaction count for the current phase:
// the producer thread calls this, then issues the bulk copies that signal `bar`.
TEGULA_DEVICE void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}

// Announce bytes without arriving (when arrivals are counted separately).
TEGULA_DEVICE void mbarrier_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}

// True once the phase with this parity has completed. The thread sleeps in the barrier
// until then or until the time limit (in ns; the hardware may answer sooner), rather than
// polling again after the hardware's short default.
TEGULA_DEVICE bool mbarrier_try_wait(uint64_t* bar, int parity) {
  constexpr uint32_t kSuspendNs = 10000000;
  uint32_t done;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(smem_addr(bar)), "r"(parity), "n"(kSuspendNs)
      : "memory");
  return done != 0;
}

// Consumers of stage s wait with parity (iteration / num_stages) & 1. The loop lives in
// C++, not in PTX, so no label is duplicated when this is inlined many times.
TEGULA_DEVICE void mbarrier_wait(uint64_t* bar, int parity) {
  while (!mbarrier_try_wait(bar, parity)) {
  }
}

#endif  // TEGULA_ARCH >= 900

}  // namespace tegula
