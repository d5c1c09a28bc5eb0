// The order in which the interpreters run a grid's blocks, and the barriers between blocks
// (T.sync_grid, the cluster barrier of T.cluster_arrive / T.cluster_wait / T.cluster_sync).
//
// Blocks run one at a time. Blocks that must meet at a barrier run as coroutines: each on
// a thread of its own, exactly one of which runs at any moment, handing control to the
// next block (round robin) when it waits at a barrier that not all of its partners have
// reached. So a grid barrier has its meaning: every block's work before it is done, in
// memory, before any block goes past it; and a run is deterministic.
//
//   grid barrier (T.sync_grid)    all the blocks of the grid run as one group
//   cluster barrier               the blocks of each cluster run as a group, cluster by cluster
//   neither                       every block alone, on the caller's thread
//
// Worked example: a grid of 3 blocks, each `write own; sync_grid; read the others'`:
// block 0 writes and waits, block 1 writes and waits, block 2 writes and finds everyone
// arrived: it reads, ends; block 0 resumes and reads, ends; block 1 resumes, reads, ends.
//
// A barrier that can never complete (a block ended, or waits at another barrier, while
// its partners wait for it) would hang the GPU; here it is a BarrierError naming the
// blocks, thrown out of run().
#pragma once
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

#include "ir/stmt.h"

namespace tegula::interp {

enum class CoRun { None, Cluster, Grid };

// Which barriers between blocks the kernel has (its calls sync_grid, cluster_*).
CoRun co_run_of(const ir::Kernel& k);

// A block's rank in its cluster of cluster_dims (x fastest): block (x, y, z) has rank
// x % cx + (y % cy) * cx + (z % cz) * cx * cy. cluster_dims empty: 0.
int64_t rank_in_cluster(const std::vector<int64_t>& cluster_dims, const int64_t* block);

struct BarrierError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class BlockScheduler;

// What a running block passes to the barriers it meets.
class BlockTicket {
 public:
  // Arrive and wait until every block of the grid has arrived as often.
  void sync_grid() const;
  // The halves of the cluster barrier: arrive (no wait), and wait for the cluster's blocks
  // to have arrived as often as this one.
  void cluster_arrive() const;
  void cluster_wait() const;

 private:
  friend class BlockScheduler;
  BlockTicket(BlockScheduler* s, int slot) : s_(s), slot_(slot) {}
  BlockScheduler* s_;
  int slot_;
};

// Runs body once per block of `grid` (3 extents; blocks x fastest), grouped as `mode` says
// with clusters of `cluster_dims` (empty: clusters of one block), which must divide the
// grid (BarrierError otherwise, as the launcher refuses such a launch). The first
// exception a block throws stops the run (the blocks waiting are unwound) and is rethrown.
void run_blocks(const int64_t* grid, const std::vector<int64_t>& cluster_dims, CoRun mode,
                const std::function<void(const BlockTicket&, const int64_t* block)>& body);

}  // namespace tegula::interp
