// Warp groups that go their own way: the branches on the thread index of a kernel whose
// threads meet at the program's own mbarriers (T.alloc_barrier), as a GPU runs them.
//
// On the GPU, branches that select disjoint ranges of threads run side by side, each range
// as far as its own waits let it, and a loop whose body is only such branches runs in each
// range as a loop of its own. run_warp_groups_apart writes that down, so the interpreters
// (which run the sides of one if/else side by side, and statements one after another) and
// the lowering see the same thing the GPU does:
//
//   for k in 0..n:                      if tx < 128:
//     if tx >= 128:  (producer k)           if tx < 128:  for k0 in 0..n: (consumer k0)
//     if tx < 128:   (consumer k)   ->  else:
//                                           if tx >= 128: for k1 in 0..n: (producer k1)
//
// Each thread runs exactly the statements it ran before, in the same order; what changes is
// that no range waits for another at a statement boundary (a consumer written first in the
// loop body may wait for the producer of the same iteration). The loop variable and the
// lets around the branches are fresh in each copy. Consecutive branches are merged into the
// if/else chain only when their ranges are whole warps and pairwise disjoint (or equal: a
// range's branches keep their order), and loops only when their body is nothing but them.
#pragma once
#include "ir/stmt.h"

namespace tegula::ir {

// Whether the kernel body calls an mbarrier of the program (mbar_*).
bool uses_mbarriers(const Stmt& body);

// body with the rewrite above, for a block of `threads` threads indexed by tx; body itself
// when nothing applies.
Stmt run_warp_groups_apart(const Stmt& body, const Expr& tx, int64_t threads);

}  // namespace tegula::ir
