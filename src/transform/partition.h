// Shared by partition_loops.cc, vectorize.cc, vectorize_loops.cc and facts.cc.
#pragma once
#include "ir/analyzer.h"
#include "ir/thread_guard.h"
#include "transform/context.h"

namespace tegula::transform {

// What holds where an access runs beyond the analyzer's ranges (facts.cc): the conditions
// around it (an if's test in its then-branch, a select's in its first arm, the left side
// of && in its right side), the ranges of the loops around it, the block indices' grid
// extents, and the ranges of let-bound values. Only comparisons that read no memory are
// facts: a variable keeps its value while it is in scope, a buffer may not.
class Facts {
 public:
  Facts(const ir::Kernel& k, ir::Analyzer an);
  size_t mark() const { return facts_.size(); }
  void restore(size_t mark) { facts_.resize(mark); }
  // cond's conjuncts hold from now on (until restore).
  void assume(const ir::Expr& cond);
  // A let: var takes value's range.
  void bind(const ir::Expr& var, const ir::Expr& value);
  // A loop: min <= var < min + extent.
  void bind_loop(const ir::Expr& var, const ir::Expr& min, const ir::Expr& extent);
  bool implies(const ir::Expr& cond) const;
  // cond without the conjuncts the facts imply; null when none is left.
  ir::Expr drop_implied(const ir::Expr& cond) const;

 private:
  void add(const ir::Expr& l, const ir::Expr& r, bool strict);
  bool less(const ir::Expr& l, const ir::Expr& r, bool strict) const;
  bool nonneg(const ir::Expr& e, int depth = 0) const;

  ir::Analyzer an_;
  std::vector<ir::Expr> facts_;  // each e, meaning e >= 0
};

using ir::thread_private_nest;

struct NestInfo {
  layout::FragmentPtr layout;
  std::vector<ir::Expr> vars;
  ir::Stmt body;
  SourceLoc loc;
  bool async = false;  // inside a T.Pipelined loop: global->shared copies may use cp.async
  Facts* facts = nullptr;  // what holds around the nest
};

// The loop body for slot s: loop variables replaced by the thread's coordinates and
// fragment accesses by registers; with mask, global accesses past the edge are masked.
ir::Stmt slot_body(const NestInfo& n, int s, ir::Kernel& k, PassContext& ctx, const ir::Analyzer& an, bool mask);

// Condition under which idx lies inside buffer b (null when provably always).
ir::Expr in_bounds(const ir::Analyzer& an, const ir::Buffer& b, const std::vector<ir::Expr>& idx);

// value with its global loads masked (0 past the tensor's edge), nested ones included.
ir::Expr mask_loads(const ir::Analyzer& an, Facts* facts, const ir::Expr& value);
// The indices of an access with the global loads inside them masked (the access itself
// is left to the caller, which tests it against the masked indices).
std::vector<ir::Expr> mask_index_loads(const ir::Analyzer& an, Facts* facts, const std::vector<ir::Expr>& idx);

// Global or shared: memory a vector access can move.
bool is_memory(const ir::Buffer& b);
// Whether neighbours along the last index are neighbours in memory, so that a vector can
// cover them: not under a T.Layout, not packed two to a byte, and a T.StridedTensor only
// when its last stride is 1.
bool vectorizable(const ir::Kernel& k, const ir::Buffer& b);
// The element offset of b[idx] from b's start: row-major, or by a T.StridedTensor's strides.
ir::Expr flat_offset(const ir::Buffer& b, const std::vector<ir::Expr>& idx);

// One vectorised copy of the body for slots [g, g+vec), or null when the accesses are not
// contiguous and aligned enough (the caller then emits the slots one by one).
ir::Stmt vectorize_group(const NestInfo& n, int g, int vec, ir::Kernel& k, PassContext& ctx, const ir::Analyzer& an);

}  // namespace tegula::transform
