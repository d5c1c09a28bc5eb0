// The accumulator layout that mma.sync m16n8k16 fixes, tiled over the block's warps.
#pragma once
#include <string>

#include "layout/fragment.h"

namespace tegula::layout {

// How T.GemmWarpPolicy splits `warps` over an m x n tile: FullRow puts every warp along
// m, FullCol along n, Square picks the split with the squarest warp tiles. False when no
// split gives each warp a whole number of 16 x 8 mma tiles.
bool gemm_warps(int64_t m, int64_t n, int warps, const std::string& policy, int* wm, int* wn);

// Thread t = 32 * warp + lane holds, for each mma tile (mi, ni) of its warp, rows
// lane/4 and lane/4 + 8 at columns 2*(lane%4) + {0, 1}: slots [mi][ni][e].
// group = 1: the warp's m-tiles are its rows' consecutive 16-row tiles (mma.sync).
// group = 4: warps form warpgroups of 4 along m, and the warpgroup's m-tiles are 64 rows
// apart, warp w % 4 taking rows 16 * (w % 4) of each: what wgmma m64nNk16 fixes.
FragmentPtr make_mma_accumulator(int64_t m, int64_t n, int wm, int wn, int group = 1);

// `base` (over its threads) held again by each of `groups` consecutive blocks of that
// many threads: thread t keeps what thread t % base.threads() keeps in base. The A operand
// of a gemm whose warp groups split the output's columns: every group needs all of A.
FragmentPtr make_group_replicated(const FragmentPtr& base, int groups);

}  // namespace tegula::layout
