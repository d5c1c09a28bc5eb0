// Thread block clusters (sm_90+): the cluster barrier and the block's rank in its cluster,
// for T.cluster_arrive / T.cluster_wait / T.cluster_sync and T.block_rank_in_cluster. A
// kernel launched without clusters is a cluster of one block: the barrier then waits for
// the block's own threads and the rank is 0. Every thread of the block reaches each
// barrier call (the .aligned forms), as the language requires.
#pragma once

#include "tegula/config.h"

namespace tegula {

TEGULA_DEVICE void cluster_arrive() {
#if TEGULA_ARCH >= 900
  asm volatile("barrier.cluster.arrive.aligned;" ::: "memory");
#endif
}

// No memory ordering: for a barrier that only schedules.
TEGULA_DEVICE void cluster_arrive_relaxed() {
#if TEGULA_ARCH >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#endif
}

TEGULA_DEVICE void cluster_wait() {
#if TEGULA_ARCH >= 900
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
#endif
}

TEGULA_DEVICE void cluster_sync() {
  cluster_arrive();
  cluster_wait();
}

// x + y * cx + z * cx * cy for the block's place (x, y, z) in its cluster of cx * cy * cz.
TEGULA_DEVICE int block_rank_in_cluster() {
#if TEGULA_ARCH >= 900
  unsigned rank;
  asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return int(rank);
#else
  return 0;
#endif
}

}  // namespace tegula
