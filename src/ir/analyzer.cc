#include "ir/analyzer.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "ir/functor.h"
#include "ir/hash.h"
#include "ir/thread_guard.h"

namespace tegula::ir {

namespace {
constexpr int64_t kInf = int64_t(1) << 62;

int64_t clamp(__int128 v) { return v > kInf ? kInf : v < -kInf ? -kInf : int64_t(v); }
int64_t floordiv_i(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }
int64_t floormod_i(int64_t a, int64_t b) { return a - floordiv_i(a, b) * b; }

Interval add(Interval a, Interval b) { return {clamp(__int128(a.lo) + b.lo), clamp(__int128(a.hi) + b.hi)}; }
Interval sub(Interval a, Interval b) { return {clamp(__int128(a.lo) - b.hi), clamp(__int128(a.hi) - b.lo)}; }
Interval mul(Interval a, Interval b) {
  __int128 c[4] = {__int128(a.lo) * b.lo, __int128(a.lo) * b.hi, __int128(a.hi) * b.lo, __int128(a.hi) * b.hi};
  return {clamp(*std::min_element(c, c + 4)), clamp(*std::max_element(c, c + 4))};
}
bool is_inf(Interval a) { return a.lo <= -kInf || a.hi >= kInf; }
}  // namespace

Interval Interval::everything() { return {-kInf, kInf}; }

void Analyzer::bind(const Expr& var, int64_t lo, int64_t hi_exclusive) { ranges_[var.get()] = {lo, hi_exclusive - 1}; }
void Analyzer::bind(const Expr& var, Interval iv) { ranges_[var.get()] = iv; }
bool Analyzer::has_bound(const Expr& var) const { return ranges_.count(var.get()) > 0; }

bool Analyzer::bind_loop(const Expr& var, const Expr& min, const Expr& extent, bool open_ended) {
  constexpr int64_t kFar = int64_t(1) << 40;
  Interval lo = bound(min), ext = bound(extent), end = bound(simplify(min + extent));
  if (lo.lo <= -kFar) return false;
  int64_t hi = Interval::everything().hi;
  if (ext.hi < kFar) hi = lo.hi + ext.hi - 1;
  if (end.hi < kFar) hi = std::min(hi, end.hi - 1);
  if (hi < lo.lo || (hi >= kFar && !open_ended)) return false;
  bind(var, Interval{lo.lo, hi});
  return true;
}

Interval Analyzer::bound(const Expr& e) const {
  switch (e.kind()) {
    case NodeKind::IntImm: {
      int64_t v = e.as<IntImmNode>()->value;
      return {v, v};
    }
    case NodeKind::Var: {
      auto it = ranges_.find(e.get());
      if (it != ranges_.end()) return it->second;
      if (e.dtype().is_bool()) return {0, 1};
      if (e.dtype().code == DataType::UInt) return {0, kInf};
      return Interval::everything();
    }
    case NodeKind::Cast: {
      auto* c = e.as<CastNode>();
      if (c->dtype.is_int() && c->value.dtype().is_int()) return bound(c->value);
      if (c->dtype.is_bool()) return {0, 1};
      return Interval::everything();
    }
    case NodeKind::Select: {
      auto* s = e.as<SelectNode>();
      Interval a = bound(s->t), b = bound(s->f);
      return {std::min(a.lo, b.lo), std::max(a.hi, b.hi)};
    }
    case NodeKind::Not: return {0, 1};
    case NodeKind::Binary: break;
    default: return Interval::everything();
  }
  auto* b = e.as<BinaryNode>();
  if (!b->a.dtype().is_int() && !b->a.dtype().is_bool()) {
    return is_comparison(b->op) ? Interval{0, 1} : Interval::everything();
  }
  Interval x = bound(b->a), y = bound(b->b);
  switch (b->op) {
    case BinaryOp::Add: return add(x, y);
    case BinaryOp::Sub: return sub(x, y);
    case BinaryOp::Mul: return mul(x, y);
    case BinaryOp::Min: return {std::min(x.lo, y.lo), std::min(x.hi, y.hi)};
    case BinaryOp::Max: return {std::max(x.lo, y.lo), std::max(x.hi, y.hi)};
    case BinaryOp::Div:
    case BinaryOp::FloorDiv:
      if (y.is_const() && y.lo > 0 && !is_inf(x) && (b->op == BinaryOp::FloorDiv || x.lo >= 0)) {
        return {floordiv_i(x.lo, y.lo), floordiv_i(x.hi, y.lo)};
      }
      if (x.lo >= 0 && y.lo > 0) return {0, x.hi};
      return Interval::everything();
    case BinaryOp::Mod:
    case BinaryOp::FloorMod:
      if (y.lo > 0 && x.lo >= 0 && x.hi < y.lo) return x;
      if (y.lo > 0 && (b->op == BinaryOp::FloorMod || x.lo >= 0)) return {0, y.hi - 1};
      return Interval::everything();
    case BinaryOp::BitAnd:
      if (x.lo >= 0 && y.lo >= 0) return {0, std::min(x.hi, y.hi)};
      return Interval::everything();
    default:
      if (is_comparison(b->op)) return {0, 1};
      return Interval::everything();
  }
}

int64_t Analyzer::known_divisor(const Expr& e) const {
  if (const int64_t* v = as_const_int(e)) return std::llabs(*v);
  if (auto* b = e.as<BinaryNode>()) {
    int64_t x = known_divisor(b->a), y = known_divisor(b->b);
    switch (b->op) {
      case BinaryOp::Add:
      case BinaryOp::Sub: return std::gcd(x, y);
      case BinaryOp::Mul: return (x == 0 || y == 0) ? 0 : std::min<int64_t>(x * y, int64_t(1) << 40);
      default: return 1;
    }
  }
  if (auto* s = e.as<SelectNode>()) return std::gcd(known_divisor(s->t), known_divisor(s->f));
  if (auto* c = e.as<CastNode>()) return c->value.dtype().is_int() ? known_divisor(c->value) : 1;
  if (e.as<VarNode>()) {
    auto it = divisors_.find(e.get());
    return it == divisors_.end() ? 1 : it->second;
  }
  return 1;
}

void Analyzer::set_divisor(const Expr& var, int64_t d) {
  if (d <= 1) return;
  int64_t& known = divisors_[var.get()];
  known = known ? std::lcm(known, d) : d;
}

bool Analyzer::can_prove(const Expr& cond) const {
  Expr s = simplify(cond);
  const int64_t* v = as_const_int(s);
  return v && *v != 0;
}

// ---------------------------------------------------------------- simplifier

namespace {

// sum(coeff * atom) + constant, over integer expressions. Atoms are compared
// structurally: the passes build the same formula (e.g. tx / 64) once per slot.
struct Linear {
  std::vector<std::pair<Expr, int64_t>> terms;
  int64_t constant = 0;
  void add(const Expr& atom, int64_t c) {
    for (auto& [a, k] : terms) {
      if (a.same_as(atom) || (a.kind() == atom.kind() && a.kind() != NodeKind::Var && structural_equal(a, atom))) {
        k += c;
        return;
      }
    }
    terms.push_back({atom, c});
  }
};

class Simplifier : public IRMutator {
 public:
  explicit Simplifier(const Analyzer& an) : an_(an) {}

  Expr mutate_Binary(const Expr& self, const BinaryNode* op) override {
    Expr a = mutate(op->a), b = mutate(op->b);
    DataType t = a.dtype();
    const int64_t* ca = as_const_int(a);
    const int64_t* cb = as_const_int(b);
    if (t.is_int() || t.is_bool()) {
      if (ca && cb) {
        if (t.code == DataType::UInt && t.bits == 64) {
          if (Expr r = fold_u64(op->op, uint64_t(*ca), uint64_t(*cb), op->dtype)) return r;
        }
        return fold(op->op, *ca, *cb, op->dtype);
      }
      if (op->op == BinaryOp::Add || op->op == BinaryOp::Sub || op->op == BinaryOp::Mul) {
        Linear l;
        if (linearize(make_binary(op->op, a, b), 1, &l)) return rebuild(l, t);
      }
      if ((op->op == BinaryOp::FloorDiv || op->op == BinaryOp::Div || op->op == BinaryOp::FloorMod ||
           op->op == BinaryOp::Mod) && cb && *cb > 0) {
        if (Expr r = divmod(op->op, a, *cb)) return r;
      }
      if (op->op == BinaryOp::And) {
        if (ca) return *ca ? b : a;
        if (cb) return *cb ? a : b;
      }
      if (op->op == BinaryOp::Or) {
        if (ca) return *ca ? a : b;
        if (cb) return *cb ? b : a;
      }
      if (is_comparison(op->op) || op->op == BinaryOp::Min || op->op == BinaryOp::Max) {
        Expr r = a.same_as(op->a) && b.same_as(op->b) ? self : make_binary(op->op, a, b, op->loc);
        if (r.dtype().is_bool() || op->op == BinaryOp::Min || op->op == BinaryOp::Max) {
          if (Expr d = decide(op->op, a, b)) return d;
        }
        return r;
      }
    } else if (auto* fa = a.as<FloatImmNode>()) {
      if (auto* fb = b.as<FloatImmNode>()) {
        if (auto r = fold_float(op->op, fa->value, fb->value, op->dtype)) return r;
      }
    }
    if (a.same_as(op->a) && b.same_as(op->b)) return self;
    return make_binary(op->op, a, b, op->loc);
  }

  Expr mutate_Select(const Expr& self, const SelectNode* op) override {
    Expr c = mutate(op->cond);
    if (const int64_t* v = as_const_int(c)) return mutate(*v ? op->t : op->f);
    Expr t = mutate(op->t), f = mutate(op->f);
    if (c.same_as(op->cond) && t.same_as(op->t) && f.same_as(op->f)) return self;
    return make_select(c, t, f, op->loc);
  }

  Expr mutate_Not(const Expr& self, const NotNode* op) override {
    Expr a = mutate(op->a);
    if (const int64_t* v = as_const_int(a)) return make_bool(*v == 0);
    return a.same_as(op->a) ? self : make_not(a, op->loc);
  }

  Stmt mutate_IfThenElse(const Stmt& self, const IfThenElseNode* op) override {
    Expr c = mutate(op->cond);
    if (const int64_t* v = as_const_int(c)) return *v ? mutate(op->then_case) : mutate(op->else_case);
    Stmt t = mutate(op->then_case), e = mutate(op->else_case);
    if (c.same_as(op->cond) && t.same_as(op->then_case) && e.same_as(op->else_case)) return self;
    return make_if(c, t, e, op->loc);
  }

 private:
  static Expr fold(BinaryOp op, int64_t a, int64_t b, DataType t) {
    int64_t r = 0;
    switch (op) {
      case BinaryOp::Add: r = a + b; break;
      case BinaryOp::Sub: r = a - b; break;
      case BinaryOp::Mul: r = a * b; break;
      case BinaryOp::Div: if (b == 0) return {}; r = a / b; break;
      case BinaryOp::Mod: if (b == 0) return {}; r = a % b; break;
      case BinaryOp::FloorDiv: if (b == 0) return {}; r = floordiv_i(a, b); break;
      case BinaryOp::FloorMod: if (b == 0) return {}; r = floormod_i(a, b); break;
      case BinaryOp::Min: r = std::min(a, b); break;
      case BinaryOp::Max: r = std::max(a, b); break;
      case BinaryOp::EQ: r = a == b; break;
      case BinaryOp::NE: r = a != b; break;
      case BinaryOp::LT: r = a < b; break;
      case BinaryOp::LE: r = a <= b; break;
      case BinaryOp::GT: r = a > b; break;
      case BinaryOp::GE: r = a >= b; break;
      case BinaryOp::And: r = a && b; break;
      case BinaryOp::Or: r = a || b; break;
      case BinaryOp::BitAnd: r = a & b; break;
      case BinaryOp::BitOr: r = a | b; break;
      case BinaryOp::BitXor: r = a ^ b; break;
      case BinaryOp::Shl: r = a << b; break;
      case BinaryOp::Shr: r = a >> b; break;
    }
    return make_int(r, t);
  }

  // The operations whose result on uint64 constants (held as bit patterns) differs from the
  // int64 one; the others fold as int64 (two's complement agrees).
  static Expr fold_u64(BinaryOp op, uint64_t a, uint64_t b, DataType t) {
    switch (op) {
      case BinaryOp::Div:
      case BinaryOp::FloorDiv: return b ? make_int(int64_t(a / b), t) : Expr();
      case BinaryOp::Mod:
      case BinaryOp::FloorMod: return b ? make_int(int64_t(a % b), t) : Expr();
      case BinaryOp::Min: return make_int(int64_t(std::min(a, b)), t);
      case BinaryOp::Max: return make_int(int64_t(std::max(a, b)), t);
      case BinaryOp::LT: return make_int(a < b, t);
      case BinaryOp::LE: return make_int(a <= b, t);
      case BinaryOp::GT: return make_int(a > b, t);
      case BinaryOp::GE: return make_int(a >= b, t);
      case BinaryOp::Shr: return make_int(int64_t(a >> b), t);
      default: return {};
    }
  }

  static Expr fold_float(BinaryOp op, double a, double b, DataType t) {
    switch (op) {
      case BinaryOp::Add: return make_float(a + b, t);
      case BinaryOp::Sub: return make_float(a - b, t);
      case BinaryOp::Mul: return make_float(a * b, t);
      case BinaryOp::Div: return make_float(a / b, t);
      case BinaryOp::Min: return make_float(std::min(a, b), t);
      case BinaryOp::Max: return make_float(std::max(a, b), t);
      default: return {};
    }
  }

  bool linearize(const Expr& e, int64_t scale, Linear* l) const {
    if (const int64_t* v = as_const_int(e)) {
      l->constant += scale * *v;
      return true;
    }
    if (auto* b = e.as<BinaryNode>()) {
      switch (b->op) {
        case BinaryOp::Add: return linearize(b->a, scale, l) && linearize(b->b, scale, l);
        case BinaryOp::Sub: return linearize(b->a, scale, l) && linearize(b->b, -scale, l);
        case BinaryOp::Mul:
          if (const int64_t* c = as_const_int(b->b)) return linearize(b->a, scale * *c, l);
          if (const int64_t* c = as_const_int(b->a)) return linearize(b->b, scale * *c, l);
          break;
        default: break;
      }
    }
    l->add(e, scale);
    return true;
  }

  static Expr rebuild(const Linear& l, DataType t) {
    Expr out;
    for (auto& [atom, k] : l.terms) {
      if (k == 0) continue;
      Expr term = k == 1 ? atom : make_binary(BinaryOp::Mul, atom, make_int(k, t));
      out = out ? make_binary(BinaryOp::Add, out, term) : term;
    }
    if (!out) return make_int(l.constant, t);
    if (l.constant != 0) out = make_binary(BinaryOp::Add, out, make_int(l.constant, t));
    return out;
  }

  // floordiv/floormod of (q*c + r) by c, where r is known to lie in [0, c).
  Expr divmod(BinaryOp op, const Expr& a, int64_t c) const {
    bool is_div = op == BinaryOp::FloorDiv || op == BinaryOp::Div;
    DataType t = a.dtype();
    if (c == 1) return is_div ? a : make_int(0, t);
    Linear l, q, r;
    linearize(a, 1, &l);
    for (auto& [atom, k] : l.terms) {
      if (k % c == 0) {
        q.add(atom, k / c);
      } else {
        r.add(atom, k);
      }
    }
    q.constant = floordiv_i(l.constant, c);
    r.constant = floormod_i(l.constant, c);
    Expr rest = rebuild(r, t);
    Interval br = an_.bound(rest);
    bool trunc = op == BinaryOp::Div || op == BinaryOp::Mod;
    if (trunc && an_.bound(a).lo < 0) return {};
    if (br.lo >= 0 && br.hi < c) return is_div ? rebuild(q, t) : rest;
    if (q.terms.empty() && q.constant == 0) return {};
    // Peel the multiple of c out when the remainder stays non-negative.
    if (br.lo >= 0) {
      Expr inner = make_binary(is_div ? BinaryOp::FloorDiv : BinaryOp::FloorMod, rest, make_int(c, t));
      return is_div ? make_binary(BinaryOp::Add, rebuild(q, t), inner) : inner;
    }
    return {};
  }

  Expr decide(BinaryOp op, const Expr& a, const Expr& b) const {
    Interval x = an_.bound(a), y = an_.bound(b);
    auto yes = [] { return make_bool(true); };
    auto no = [] { return make_bool(false); };
    switch (op) {
      case BinaryOp::LT: if (x.hi < y.lo) return yes(); if (x.lo >= y.hi) return no(); break;
      case BinaryOp::LE: if (x.hi <= y.lo) return yes(); if (x.lo > y.hi) return no(); break;
      case BinaryOp::GT: if (x.lo > y.hi) return yes(); if (x.hi <= y.lo) return no(); break;
      case BinaryOp::GE: if (x.lo >= y.hi) return yes(); if (x.hi < y.lo) return no(); break;
      case BinaryOp::Min: if (x.hi <= y.lo) return a; if (y.hi <= x.lo) return b; break;
      case BinaryOp::Max: if (x.lo >= y.hi) return a; if (y.lo >= x.hi) return b; break;
      default: break;
    }
    return {};
  }

  const Analyzer& an_;
};

}  // namespace

Expr Analyzer::simplify(const Expr& e) const { return Simplifier(*this).mutate(e); }
Stmt Analyzer::simplify(const Stmt& s) const { return Simplifier(*this).mutate(s); }

bool eval_int(const Expr& e, const VarValues& vars, int64_t* out) {
  switch (e.kind()) {
    case NodeKind::IntImm: *out = e.as<IntImmNode>()->value; return true;
    case NodeKind::Var: {
      auto it = vars.find(e.get());
      if (it == vars.end()) return false;
      *out = it->second;
      return true;
    }
    case NodeKind::Cast: return e.dtype().is_int() && eval_int(e.as<CastNode>()->value, vars, out);
    case NodeKind::Select: {
      auto* s = e.as<SelectNode>();
      int64_t c;
      if (!eval_int(s->cond, vars, &c)) return false;
      return eval_int(c ? s->t : s->f, vars, out);
    }
    case NodeKind::Binary: {
      auto* b = e.as<BinaryNode>();
      int64_t x, y;
      if (!eval_int(b->a, vars, &x) || !eval_int(b->b, vars, &y)) return false;
      switch (b->op) {
        case BinaryOp::Add: *out = x + y; return true;
        case BinaryOp::Sub: *out = x - y; return true;
        case BinaryOp::Mul: *out = x * y; return true;
        case BinaryOp::Div: if (!y) return false; *out = x / y; return true;
        case BinaryOp::Mod: if (!y) return false; *out = x % y; return true;
        case BinaryOp::FloorDiv: if (!y) return false; *out = floordiv_i(x, y); return true;
        case BinaryOp::FloorMod: if (!y) return false; *out = floormod_i(x, y); return true;
        case BinaryOp::Min: *out = std::min(x, y); return true;
        case BinaryOp::Max: *out = std::max(x, y); return true;
        case BinaryOp::EQ: *out = x == y; return true;
        case BinaryOp::NE: *out = x != y; return true;
        case BinaryOp::LT: *out = x < y; return true;
        case BinaryOp::LE: *out = x <= y; return true;
        case BinaryOp::GT: *out = x > y; return true;
        case BinaryOp::GE: *out = x >= y; return true;
        case BinaryOp::And: *out = x && y; return true;
        case BinaryOp::Or: *out = x || y; return true;
        case BinaryOp::BitAnd: *out = x & y; return true;
        case BinaryOp::BitOr: *out = x | y; return true;
        case BinaryOp::BitXor: *out = x ^ y; return true;
        case BinaryOp::Shl: *out = x << y; return true;
        case BinaryOp::Shr: *out = x >> y; return true;
      }
      return false;
    }
    default: return false;
  }
}

int64_t dynamic_size_limit(const Expr& var) {
  return var.dtype().bits == 64 ? (int64_t(1) << 48) : (int64_t(1) << 31);
}

Analyzer kernel_analyzer(const Kernel& k) {
  Analyzer an;
  an.bind(k.thread_var, 0, k.threads);
  for (size_t d = 0; d < k.block_vars.size(); ++d) {
    Interval g = an.bound(k.grid[d]);
    an.bind(k.block_vars[d], Interval{0, g.hi - 1});
  }
  for (auto& v : k.dynamic_vars) an.bind(v, Interval{0, dynamic_size_limit(v) - 1});
  // A thread scope's index (scope_thread_guards.cc) counts its threads from 0.
  post_order(k.body, [&](const Stmt& s) {
    auto* let = s.as<LetStmtNode>();
    if (auto r = let ? thread_scope_range(let->value) : std::nullopt) an.bind(let->var, 0, r->count());
  });
  return an;
}

}  // namespace tegula::ir
