// Integer facts about expressions: ranges, divisibility, numeric evaluation, and the
// simplifier that uses them.
//
// Example: with tx in [0, 512), simplify(floordiv(tx * 8 + 3, 4096)) == 0 and
// simplify(floormod(tx * 8 + 3, 4096)) == tx * 8 + 3, which is what turns a fragment
// layout's coordinate formulas into plain per-thread offsets.
#pragma once
#include <unordered_map>

#include "ir/stmt.h"

namespace tegula::ir {

struct Interval {
  int64_t lo, hi;  // inclusive
  static Interval everything();
  bool is_const() const { return lo == hi; }
};

class Analyzer {
 public:
  // Declares var in [lo, hi).
  void bind(const Expr& var, int64_t lo, int64_t hi_exclusive);
  void bind(const Expr& var, Interval iv);
  bool has_bound(const Expr& var) const;
  // Binds a loop's variable for its body: min <= var < min + extent, the upper end the
  // tighter of min's and extent's ranges added and the range of min + extent simplified
  // (`for k in range(by * 4, 128)` is k < 128 whatever by is). Binds nothing when min has no
  // lower bound, the loop never runs, or (unless open_ended) the end has no upper bound;
  // open_ended binds var >= min alone then. Returns whether it bound var.
  bool bind_loop(const Expr& var, const Expr& min, const Expr& extent, bool open_ended = false);
  // Declares var a multiple of d (T.assume(n % d == 0)); known_divisor reads it.
  void set_divisor(const Expr& var, int64_t d);

  Interval bound(const Expr& e) const;
  // The largest d known to divide every value of e (0 means e == 0).
  int64_t known_divisor(const Expr& e) const;
  // true only when cond holds for every value of the bound variables.
  bool can_prove(const Expr& cond) const;
  Expr simplify(const Expr& e) const;
  Stmt simplify(const Stmt& s) const;

 private:
  std::unordered_map<const ExprNode*, Interval> ranges_;
  std::unordered_map<const ExprNode*, int64_t> divisors_;
};

// Numeric evaluation with the given variable values; false when e reads memory or a
// variable without a value.
using VarValues = std::unordered_map<const ExprNode*, int64_t>;
bool eval_int(const Expr& e, const VarValues& vars, int64_t* out);

// A dynamic size is below this: 2^31 for an int32 one (T.dynamic("n")), 2^48 for an int64
// one (T.dynamic("n", "int64"), whose kernel indexes with 64-bit arithmetic).
int64_t dynamic_size_limit(const Expr& var);

// An analyzer that knows the ranges of a kernel's thread index (and its thread scopes'),
// block indices and dynamic sizes.
Analyzer kernel_analyzer(const Kernel& k);

}  // namespace tegula::ir
