// Two warpgroups for a one-warpgroup kernel whose fragments do not fit its registers.
//
// A tile program's meaning does not depend on how many threads run it, unless it reads the
// thread index or does something once per thread. When a kernel declared with 128 threads
// keeps more fragment registers per thread than a thread has (FlashAttention's 128 x 128
// score and output tiles on one warpgroup: 256 of them, so ptxas spills), lowering it on
// 256 threads halves every fragment's registers per thread and needs no spill; pipeline.cc
// does so when the program is free of the thread count (below) and the wider kernel fits.
#pragma once
#include <vector>

#include "ir/stmt.h"

namespace tegula::transform {

// Registers per thread a one-warpgroup kernel's fragments may take before it is lowered
// again on two warpgroups (what fragments get of 248, as registers.py counts).
constexpr int kWidenAboveRegisters = 224;

// True when no result of k depends on its thread count: it never reads the thread index,
// puts no user layout on a fragment, calls only pure math, and does every atomic update
// inside a T.Parallel nest or tile op (where each element is updated once, whatever the
// threads), not once per thread.
bool thread_count_free(const ir::Kernel& k);

// True when k has a T.gemm (the tensor-core tiles that fill registers).
bool has_gemm(const ir::Kernel& k);

// 32-bit registers per thread k's fragments take, each its elements over k.threads, less
// the fragments only ever written whole from another fragment (a float16 copy of the score
// tile: its source dies as it is made, so the two are not live together).
int fragment_registers(const ir::Kernel& k);

}  // namespace tegula::transform
