// Facts: what holds where an access runs, beyond the analyzer's ranges (partition.h).
//
// Every fact is kept as `e >= 0` for an integer e (a < b becomes b - a - 1 >= 0), and a
// comparison follows from one when the difference of the two e's is never negative by the
// ranges: with the fact tile < m, the mask tile < m is implied (difference 0), and with
// k < n - first, the mask first + k < 16 when n <= 16 (difference 16 - n). min and max are
// taken apart first: x < min(a, b) is x < a and x < b; min(x, p - 1) < p holds since
// p - 1 < p does. A sum, product or quotient of terms that are not negative is not
// negative either: c chunks of a grid of c blocks are at least one (bx < c), so
// bx * ceildiv(n, c) + tx >= 0.
#include "ir/functor.h"
#include "transform/partition.h"

namespace tegula::transform {

using namespace ir;

namespace {

bool reads_memory(const Expr& e) {
  bool found = false;
  post_order(make_evaluate(e), nullptr, [&](const Expr& x) {
    found |= x.as<BufferLoadNode>() != nullptr || x.as<CallNode>() != nullptr;
  });
  return found;
}

void conjuncts(const Expr& e, std::vector<Expr>* out) {
  auto* b = e.as<BinaryNode>();
  if (b && b->op == BinaryOp::And) {
    conjuncts(b->a, out);
    conjuncts(b->b, out);
  } else {
    out->push_back(e);
  }
}

// A comparison of integers as l < r (strict) or l <= r; false for anything else.
bool as_less(const Expr& e, Expr* l, Expr* r, bool* strict) {
  auto* b = e.as<BinaryNode>();
  if (!b || !b->a.dtype().is_int() || !b->b.dtype().is_int() || b->a.dtype().lanes != 1) return false;
  switch (b->op) {
    case BinaryOp::LT: *l = b->a, *r = b->b, *strict = true; return true;
    case BinaryOp::LE: *l = b->a, *r = b->b, *strict = false; return true;
    case BinaryOp::GT: *l = b->b, *r = b->a, *strict = true; return true;
    case BinaryOp::GE: *l = b->b, *r = b->a, *strict = false; return true;
    default: return false;
  }
}

const BinaryNode* as_op(const Expr& e, BinaryOp op) {
  auto* b = e.as<BinaryNode>();
  return b && b->op == op ? b : nullptr;
}

}  // namespace

Facts::Facts(const Kernel& k, Analyzer an) : an_(std::move(an)) {
  for (size_t d = 0; d < k.block_vars.size() && d < k.grid.size(); ++d) {
    assume(make_binary(BinaryOp::LT, k.block_vars[d], k.grid[d]));
  }
}

void Facts::assume(const Expr& cond) {
  std::vector<Expr> parts;
  conjuncts(cond, &parts);
  for (const Expr& c : parts) {
    Expr l, r;
    bool strict;
    if (!reads_memory(c) && as_less(c, &l, &r, &strict)) add(l, r, strict);
  }
}

void Facts::add(const Expr& l, const Expr& r, bool strict) {
  if (auto* m = as_op(r, BinaryOp::Min)) {
    add(l, m->a, strict);
    add(l, m->b, strict);
    return;
  }
  if (auto* m = as_op(l, BinaryOp::Max)) {
    add(m->a, r, strict);
    add(m->b, r, strict);
    return;
  }
  // x < max(a, b) where x < a cannot hold: x < b (a loop of T.max(0, n) iterations).
  if (auto* m = as_op(r, BinaryOp::Max)) {
    if (less(m->a, l, !strict)) add(l, m->b, strict);
    if (less(m->b, l, !strict)) add(l, m->a, strict);
  }
  // 0 <= x < y // d for a constant d > 0: d <= y (a grid of ceildiv(s, 8) blocks runs
  // only where s >= 1).
  auto* q = r.as<BinaryNode>();
  const int64_t* d = q && (q->op == BinaryOp::FloorDiv || q->op == BinaryOp::Div) ? as_const_int(q->b) : nullptr;
  if (strict && d && *d > 0 && nonneg(l)) add(make_int(*d, q->a.dtype()), q->a, false);
  Expr e = make_binary(BinaryOp::Sub, r, l);
  if (strict) e = make_binary(BinaryOp::Sub, e, make_int(1, e.dtype()));
  facts_.push_back(an_.simplify(e));
}

void Facts::bind(const Expr& var, const Expr& value) {
  if (var.dtype().is_int()) an_.bind(var, an_.bound(value));
}

void Facts::bind_loop(const Expr& var, const Expr& min, const Expr& extent) {
  an_.bind_loop(var, min, extent);
  assume(make_binary(BinaryOp::GE, var, min));
  assume(make_binary(BinaryOp::LT, var, an_.simplify(make_binary(BinaryOp::Add, min, extent))));
}

// l < r (strict) or l <= r, from the ranges and the facts.
bool Facts::less(const Expr& l, const Expr& r, bool strict) const {
  if (auto* m = as_op(r, BinaryOp::Min)) return less(l, m->a, strict) && less(l, m->b, strict);
  if (auto* m = as_op(r, BinaryOp::Max)) return less(l, m->a, strict) || less(l, m->b, strict);
  if (auto* m = as_op(l, BinaryOp::Max)) return less(m->a, r, strict) && less(m->b, r, strict);
  if (auto* m = as_op(l, BinaryOp::Min)) return less(m->a, r, strict) || less(m->b, r, strict);
  if (!l.dtype().is_int() || !r.dtype().is_int()) return false;
  Expr e = make_binary(BinaryOp::Sub, r, l);
  if (strict) e = make_binary(BinaryOp::Sub, e, make_int(1, e.dtype()));
  return nonneg(an_.simplify(e));
}

// e >= 0, from e's range, or its difference with a fact, or its terms.
bool Facts::nonneg(const Expr& e, int depth) const {
  if (an_.bound(e).lo >= 0) return true;
  for (const Expr& f : facts_) {
    if (an_.bound(an_.simplify(make_binary(BinaryOp::Sub, e, f))).lo >= 0) return true;
  }
  if (depth >= 8 || !e.dtype().is_int()) return false;
  if (auto* c = e.as<CastNode>()) return c->value.dtype().is_int() && nonneg(c->value, depth + 1);
  auto* b = e.as<BinaryNode>();
  if (!b) return false;
  switch (b->op) {
    case BinaryOp::Add:
    case BinaryOp::Mul:
    case BinaryOp::Min: return nonneg(b->a, depth + 1) && nonneg(b->b, depth + 1);
    case BinaryOp::Max: return nonneg(b->a, depth + 1) || nonneg(b->b, depth + 1);
    case BinaryOp::FloorDiv:
    case BinaryOp::Div: {
      Expr divisor_less_one = an_.simplify(make_binary(BinaryOp::Sub, b->b, make_int(1, b->b.dtype())));
      return nonneg(b->a, depth + 1) && nonneg(divisor_less_one, depth + 1);
    }
    default: return false;
  }
}

bool Facts::implies(const Expr& cond) const {
  Expr l, r;
  bool strict;
  if (as_less(cond, &l, &r, &strict)) return less(l, r, strict);
  return an_.can_prove(cond);
}

Expr Facts::drop_implied(const Expr& cond) const {
  std::vector<Expr> parts;
  conjuncts(cond, &parts);
  Expr out;
  for (const Expr& c : parts) {
    if (implies(c)) continue;
    out = out ? (out && c) : c;
  }
  return out;
}

}  // namespace tegula::transform
