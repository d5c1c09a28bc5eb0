// Checks the invariants every pass must keep; run between passes in tests (and by the
// pipeline when asked). A failure is our bug, never the user's, so it throws InternalError
// naming the stage that broke the IR and printing the offending node:
//
//   IR verification failed after 'lower_tile_ops': variable 'i' is used outside the scope that binds it
//     node: A_shared[i, 0]
//     in:   B[0, i] = A_shared[i, 0]
//
// What is checked:
//  * every Var is bound where it is used: by an enclosing For or Let, or by the kernel
//    (scalar params, dynamic vars, block vars, thread var);
//  * every buffer touched is a param or in `allocs`;
//  * loads and stores give one index per dimension, and a constant index lies inside a
//    constant dimension (a vector access of n lanes needs its last n elements inside);
//    past a register array (a T.alloc_local's) it is the user's mistake, not ours (the
//    unrolled loops of their program make such a constant): a UserError at the access;
//  * tile-op regions give a min and an extent per dimension, inside constant dimensions;
//  * a store's value and a load have the buffer's element type (lanes aside);
//  * For bounds are integers; both operands of a Binary have the same dtype.
#pragma once
#include <string>

#include "ir/stmt.h"

namespace tegula::ir {

void verify(const Kernel& k, const std::string& stage);

}  // namespace tegula::ir
