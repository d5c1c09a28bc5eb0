// The accumulator layout that mma.sync m16n8k16 fixes, tiled over the block's warps.
#pragma once
#include <string>

#include "layout/fragment.h"

namespace tegula::layout {

// How T.GemmWarpPolicy splits `warps` over an m x n tile: FullRow puts as many warps
// along m as the rows allow and the rest along n (TileLang's fallback: 8 warps over a
// 64 x 64 tile are 4 x 2), FullCol the same along n, Square picks the split with the
// squarest warp tiles. False when no split gives each warp a whole number of 16 x 8 mma
// tiles.
bool gemm_warps(int64_t m, int64_t n, int warps, const std::string& policy, int* wm, int* wn);

// The split of `units` (a power-of-two count of warps or warpgroups) into a x b by policy,
// among those `fits(a, b)` accepts; `aspect(a, b)` is the unit tile's height / width,
// which Square brings closest to 1.
template <typename Fits, typename Aspect>
bool split_by_policy(int units, const std::string& policy, Fits fits, Aspect aspect, int* ua, int* ub) {
  if (policy == "FullRow" || policy == "FullCol") {
    for (int most = units; most >= 1; most /= 2) {
      int a = policy == "FullRow" ? most : units / most, b = units / a;
      if (a * b == units && fits(a, b)) return *ua = a, *ub = b, true;
    }
    return false;
  }
  double best = -1;
  for (int a = 1; a <= units; a *= 2) {
    int b = units / a;
    if (a * b != units || !fits(a, b)) continue;
    double ratio = aspect(a, b);
    double score = ratio > 1 ? 1 / ratio : ratio;
    if (score > best) best = score, *ua = a, *ub = b;
  }
  return best > 0;
}

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

// A 2-D `base` with its dimensions swapped: (j, i) where base holds (i, j). The A operand
// of T.gemm(A_fragment, B, C, transpose_A=True), A stored K x M: its threads hold Aᵀ's
// elements where a gemm without the transpose holds A's, so the instruction reads the
// same registers.
FragmentPtr make_transposed(const FragmentPtr& base);

}  // namespace tegula::layout
