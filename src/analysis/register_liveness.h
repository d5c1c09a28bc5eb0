// Analysis: register_liveness — how many 32-bit registers per thread each fragment of a
// kernel takes, and how many of them are live at once at the worst statement.
// tegula.registers presents it (JITKernel.register_usage, RegisterPressureWarning).
//
// Reads: the kernel after lower_fragments (transform/pipeline.cc), the last stage that
// still has tile operations (gemm, reduce, copy) and that declares every fragment beside
// the per-thread register array lower_fragments made for it. That pass appends one array
// per fragment, in the fragments' order, after every other allocation; a kernel whose
// allocations do not end so is of another stage, and the analysis gives nothing.
//
// A fragment's registers: its array's slots times its element's bytes on chip
// (DataType::bytes: a float8 or 4-bit element takes one), over 4, rounded up.
// acc_o = T.alloc_fragment((128, 128), "float32") over 128 threads is 128 slots, 128
// registers; a float16 tile of the same shape, 64; a row vector (128,) whose value each of
// the 4 threads sharing a row keeps, 4.
//
// What must fit is not the sum over all fragments but those live at once. ptxas allocates
// element by element, so a fragment counts from where it is (re)defined to its last read;
// the body is walked backwards from the end, where nothing is live:
// - A statement reads the fragments its own expressions load, store or name in a tile op's
//   regions (a loop's head: its bounds; a branch's: its condition; a let: its value);
//   whatever no rule below recognises counts as a read, which only raises the estimate
//   towards the plain sum.
// - Written whole, so dead before the statement (it reads nothing of the old value):
//   * T.gemm (C, the third region; T.gemm_sp's fourth) with clear_accum=1 over all of C;
//   * T.copy into all of a fragment its source does not name; T.reduce likewise, clear=1;
//   * T.fill of all of a fragment;
//   * in a T.Parallel nest, a fragment the nest does not read and stores only at exactly
//     its loop variables, in order, over the fragment's whole shape, never under a branch
//     or a loop other than the nest's own T.Parallel loops.
//   A tile op that writes part of a fragment defines it and reads it.
// - Live at a statement: what is live before it, after it, and what it defines. An
//   elementwise statement (T.copy, T.fill, a T.Parallel nest) that turns one fragment into
//   another (acc_s_cast[i, j] = acc_s[i, j]) holds the larger of the two, not both: what
//   stays live across it, plus the larger of what dies there and what is born there.
// - A loop (any kind but T.Parallel, a while loop too) is walked until what its body needs
//   at its start stops growing: that is live at its end as well (carried to the next trip).
// - A branch: live before it is what any arm needs (and, without an else, what is live
//   after it).
// The peak is the largest total; on a tie, the statement that comes first.
//
// Example: FlashAttention at 128x64 tiles, head dimension 128, 128 threads (sm_90a): the
// fragments sum to 244 registers but at most 208 are live (acc_o 128 + acc_s 64 + four row
// vectors of 4), and ptxas fits the kernel in 255 registers without a spill; at 128x128
// tiles 272 are live, and ptxas spills 1.5 to 1.8 KB of stack per thread.
#pragma once
#include <optional>
#include <vector>

#include "ir/stmt.h"

namespace tegula::analysis {

struct FragmentRegisters {
  ir::Buffer fragment;  // as declared
  int64_t slots = 0;    // entries of its per-thread register array
  int registers = 0;    // 32-bit registers per thread
};

struct RegisterLiveness {
  std::vector<FragmentRegisters> fragments;  // every fragment, in declaration order
  int peak = 0;                              // registers of the fragments live at once, at the worst statement
  std::vector<int> live_at_peak;             // indices into fragments: largest first, ties in declaration order
  // The worst statement: for a loop or a let, its head is meant; null where the peak is at
  // an empty block (which the printer shows as `pass`).
  ir::Stmt peak_at;
};

// Of a kernel after lower_fragments; nullopt for a kernel of any other stage.
std::optional<RegisterLiveness> register_liveness(const ir::Kernel& k);

}  // namespace tegula::analysis
