// Branches on the thread index, and which code every thread of a block runs alike.
//
// TileLang gives tile code under a branch on the thread index its own meaning: in
//   tx = T.get_thread_binding(0)          (256 threads)
//   if tx < 128:
//       T.copy(A[by * 64, 0], A_shared)
// the copy is partitioned over the 128 threads that take the branch, not over the block.
// That needs the set of those threads at compile time, as one contiguous range:
//   tx < 128            -> [0, 128), its else [128, 256)
//   tx // 128 == 1      -> [128, 256)
//   tx >= 64 and bx < n -> [64, 256) in the blocks where the block-uniform `bx < n` holds
// split_guard evaluates the conjuncts that read the thread index for every thread of the
// enclosing range; the rest must be the same for every thread (uniform).
#pragma once
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ir/stmt.h"

namespace tegula::ir {

struct ThreadRange {
  int64_t lo = 0, hi = 0;  // [lo, hi)
  int64_t count() const { return hi - lo; }
  bool operator==(const ThreadRange& o) const { return lo == o.lo && hi == o.hi; }
};

struct GuardSplit {
  bool reads_thread = false;   // some conjunct reads the thread index
  bool evaluable = true;       // those conjuncts read nothing but it and constants
  Expr uniform;                // the conjuncts that do not read it (null: none)
  std::vector<bool> takes;     // per thread of the enclosing range: its conjuncts hold
};

// cond split at its top-level `and`s; `lets` are substituted first (a condition on a
// let-bound value of the thread index reads the thread index).
GuardSplit split_guard(const Expr& cond, const Expr& tx, ThreadRange outer,
                       const std::vector<std::pair<Expr, Expr>>& lets);

// The threads of `outer` whose entry in takes equals `value`, when they are one
// contiguous range (empty ranges included); nullopt otherwise.
std::optional<ThreadRange> contiguous_range(const std::vector<bool>& takes, ThreadRange outer, bool value);

// A T.Parallel nest that touches no fragment and stores only into local buffers (no
// atomic add among the values stored): each thread runs it whole (TileLang's rule), so it
// is not divided among threads.
bool thread_private_nest(const Stmt& s);

// The fragments body reads or writes outside every T.Parallel nest and tile op (a scalar
// `f[k]` in a serial loop or a condition). Layout inference holds each of them whole in
// every thread (layout::make_replicated), so all threads read the same value there.
// Each with the place of its first such access.
std::map<const BufferNode*, SourceLoc> fragments_held_whole(const Stmt& body);

// Whether a call's value depends on its arguments alone (math functions, min / max, select).
bool pure_call(const std::string& op);

// Whether e reads the variable v.
bool reads_var(const Expr& e, const Expr& v);

// Tracks which values are the same in every thread of a block, for a walk over the
// kernel: the thread index is not, nor what is computed from it, nor a fragment's element.
// A local buffer (T.alloc_local, T.alloc_var) is each thread's own, but holds the same
// value in all of them unless some store into it differs between threads (a varying value
// or index, inside a T.Parallel loop, under a branch that differs): `learn` finds those.
// Given the block's thread count, a store under branches that select a range of threads
// by the thread index is the same in every thread of that range: the buffer is then the
// same in the threads of any range each such store either covers or leaves alone
// (uniform_in), as a T.alloc_var a warp group sets for itself is in that group.
class Uniformity {
 public:
  explicit Uniformity(const Expr& thread_var, int64_t threads = 0) : threads_(threads) {
    varying_.insert(thread_var.get());
    tx_ = thread_var;
  }
  // Finds the local buffers of body whose stores differ between threads (to a fixed point).
  // For the tile-level program only: after lowering, register arrays are written by calls
  // (a gemm's accumulator) that no store shows.
  void learn(const Stmt& body);
  // As learn, for lowered code (insert_barriers): a register array handed to a call (a
  // gemm's accumulator, a matrix load's destination: written through its address) counts
  // as varying, since no store shows what the call writes.
  void learn_lowered(const Stmt& body);
  bool uniform(const Expr& e) const { return uniform_given(e, {}); }
  // As uniform, for the threads of `range` alone.
  bool uniform_in(const Expr& e, ThreadRange range) const { return uniform_impl(e, {}, range); }
  // As uniform, with the variables in `same` taken as the same in every thread (the
  // variables of a T.Parallel nest that every thread runs whole).
  bool uniform_given(const Expr& e, const std::set<const ExprNode*>& same) const {
    return uniform_impl(e, same, ThreadRange{0, threads_});
  }
  const std::map<const BufferNode*, SourceLoc>& whole_fragments() const { return whole_fragments_; }
  // A let (or a loop whose bounds are `value`'s): the variable varies when its value does.
  void bind(const Expr& var, const Expr& value) {
    if (!uniform(value)) varying_.insert(var.get());
  }
  void mark_varying(const Expr& var) { varying_.insert(var.get()); }
  const Expr& thread_var() const { return tx_; }
  int64_t threads() const { return threads_; }

 private:
  bool uniform_impl(const Expr& e, const std::set<const ExprNode*>& same, ThreadRange in) const;
  Expr tx_;
  int64_t threads_ = 0;  // 0: ranges of threads are not tracked
  // The ranges of threads the stores into a local buffer run under (learn, with threads_).
  std::map<const BufferNode*, std::vector<ThreadRange>> store_ranges_;
  std::set<const ExprNode*> varying_;
  std::set<const BufferNode*> varying_locals_;
  bool locals_known_ = false;  // before learn, every local buffer counts as varying
  // Fragments held whole by every thread (fragments_held_whole); their elements are the
  // same in all threads unless a store into them differs (then in varying_locals_).
  std::map<const BufferNode*, SourceLoc> whole_fragments_;
};

// The intrinsic a thread scope's let binds (transform/scope_thread_guards.cc):
//   tx_g = thread_scope(tx, lo, count)     the thread's index among the `count` threads
//                                          [lo, lo + count) that run the body: tx - lo
inline constexpr const char* kThreadScope = "thread_scope";
// The range of a thread scope's let value, or nullopt when value is not one.
std::optional<ThreadRange> thread_scope_range(const Expr& value);

}  // namespace tegula::ir
