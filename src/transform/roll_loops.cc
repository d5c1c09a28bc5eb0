// Pass: roll_loops (last, after final_simplify).
//
// partition_loops writes a T.Parallel nest as one copy of its body per element a thread
// holds, so that a fragment's registers are addressed by constants. That is what keeps a
// fragment in registers, and it is only worth its code while the fragment fits them: a
// thread's array of more than 255 32-bit words lives in local memory however it is
// indexed, and its thousands of straight-line statements cost NVRTC seconds (a 32 x 5120
// float32 tile over 128 threads: 1280 words a thread, 20 s to compile) and buy nothing.
//
// Expects: the lowered kernel. Guarantees: in a kernel with such an array (and only
// there), every run of statements that repeats with a period, touches such an array, and
// differs from one period to the next only by integer constants that grow by a fixed step
// (and by which of several identical temporaries it uses, each used by its period alone),
// becomes a serial loop over the periods whose body is the first period with those
// constants written as `first + r * step`; runs of such loops roll again (nested loops).
// The rolled code computes what the straight-line code computed, statement for statement:
// every period is checked against the formula, not assumed. Constants are rolled only in
// arithmetic and indices, never where the printer needs a literal (a call's own arguments).
#include <map>
#include <set>

#include "ir/functor.h"
#include "transform/passes.h"

namespace tegula::transform {

using namespace ir;

namespace {

constexpr int64_t kRegisterWords = 255;  // a thread's most registers
constexpr size_t kMaxPeriod = 64;        // statements in one period
constexpr size_t kMinCount = 3;          // periods worth a loop

bool oversized(const Buffer& b) {
  if (b->scope != Scope::Local || b->scalar) return false;
  int64_t n = b->num_elements_const();
  return n > 0 && n * b->dtype.bytes() > kRegisterWords * 4;
}

bool may_roll(const DataType& t) { return t.is_int() && t.bits >= 32 && t.lanes == 1; }

// Parallel walk of a template statement (a) and another (b): the same tree but for the
// integer constants where they may differ (recorded, in walk order), the variables bound
// inside (mapped a -> b) and temporaries (mapped a -> b, checked by the caller). Without b,
// the same walk rebuilds a with each recorded constant replaced (rebuild mode).
class Walk {
 public:
  // Compare mode.
  Walk() = default;
  // Rebuild mode: constant k becomes replace[k] when set; `virtual_at` is the compare
  // walk's (the nodes after which it took a missing "+ 0").
  Walk(const std::vector<Expr>* replace, const std::map<int, size_t>* virtual_at)
      : replace_(replace), virtual_(virtual_at) {}

  std::map<int, size_t> virtual_at;  // compare mode: node number -> its constant

  std::vector<int64_t> a_vals, b_vals;
  std::vector<DataType> dtypes;
  std::map<const BufferNode*, Buffer> buffers;
  bool ok = true;

  bool stmt(const Stmt& a, const Stmt& b) {
    ok = ok && same_stmt(a, b);
    return ok;
  }
  Stmt rebuild(const Stmt& a) { return re_stmt(a); }

 private:
  const std::vector<Expr>* replace_ = nullptr;
  const std::map<int, size_t>* virtual_ = nullptr;
  size_t next_ = 0;
  int node_ = 0;
  std::map<const ExprNode*, const ExprNode*> vars_;

  bool same_buffer(const Buffer& a, const Buffer& b) {
    if (a == b) return true;
    if (a->scope != Scope::Local || b->scope != Scope::Local || a->dtype != b->dtype || a->scalar != b->scalar ||
        a->num_elements_const() <= 0 || a->num_elements_const() != b->num_elements_const() || a->view_of ||
        b->view_of) {
      return false;
    }
    auto [it, fresh] = buffers.emplace(a.get(), b);
    return fresh || it->second == b;
  }

  bool same_list(const std::vector<Expr>& a, const std::vector<Expr>& b, bool vary) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!same(a[i], b[i], vary)) return false;
    }
    return true;
  }

  // An integer constant: x in a, y in b.
  bool leaf(int64_t x, int64_t y, DataType t, bool vary) {
    bool v = vary && may_roll(t);
    a_vals.push_back(x);
    b_vals.push_back(v ? y : x);  // a constant that may not roll has no step
    dtypes.push_back(t);
    return x == y || v;
  }

  static const IntImmNode* added_constant(const Expr& e) {
    auto* add = e.as<BinaryNode>();
    auto* c = add && add->op == BinaryOp::Add ? add->b.as<IntImmNode>() : nullptr;
    return c && may_roll(c->dtype) ? c : nullptr;
  }

  // vary: an integer constant right here may differ between a and b. The simplifier drops
  // a "+ 0", so the first period's `tx * 4` stands for the others' `tx * 4 + 512 * j`:
  // where the two differ at the top, `e` against `e + c` is `e + 0` against it (the
  // template then gets the `+ formula` its rebuild adds, recorded by the node's number).
  bool same(const Expr& a, const Expr& b, bool vary) {
    if (!a || !b) return !a && !b;
    int id = ++node_;
    bool shallow = a.kind() != b.kind() || a.dtype() != b.dtype() ||
                   (a.as<BinaryNode>() && a.as<BinaryNode>()->op != b.as<BinaryNode>()->op);
    if (!shallow || !vary) return same_node(a, b, vary);
    if (const IntImmNode* c = added_constant(b); c && a.dtype() == b.dtype()) {
      if (!same_node(a, b.as<BinaryNode>()->a, vary)) return false;
      virtual_at[id] = a_vals.size();
      return leaf(0, c->value, c->dtype, true);
    }
    if (const IntImmNode* c = added_constant(a); c && a.dtype() == b.dtype()) {
      if (!same(a.as<BinaryNode>()->a, b, vary)) return false;
      ++node_;  // the constant's node
      return leaf(c->value, 0, c->dtype, true);
    }
    return false;
  }

  bool same_node(const Expr& a, const Expr& b, bool vary) {
    if (a.kind() != b.kind() || a.dtype() != b.dtype()) return false;
    switch (a.kind()) {
      case NodeKind::IntImm:
        return leaf(a.as<IntImmNode>()->value, b.as<IntImmNode>()->value, a.dtype(), vary);
      case NodeKind::FloatImm:
        return a.as<FloatImmNode>()->value == b.as<FloatImmNode>()->value;
      case NodeKind::Var: {
        if (a.same_as(b)) return true;
        auto it = vars_.find(a.get());
        return it != vars_.end() && it->second == b.get();
      }
      case NodeKind::Binary: {
        auto *x = a.as<BinaryNode>(), *y = b.as<BinaryNode>();
        return x->op == y->op && same(x->a, y->a, true) && same(x->b, y->b, true);
      }
      case NodeKind::Not:
        return same(a.as<NotNode>()->a, b.as<NotNode>()->a, false);
      case NodeKind::Select: {
        auto *x = a.as<SelectNode>(), *y = b.as<SelectNode>();
        return same(x->cond, y->cond, false) && same(x->t, y->t, true) && same(x->f, y->f, true);
      }
      case NodeKind::Cast:
        return same(a.as<CastNode>()->value, b.as<CastNode>()->value, true);
      case NodeKind::Call: {
        auto *x = a.as<CallNode>(), *y = b.as<CallNode>();
        // A call's own constant arguments may be spelled as literals (template arguments,
        // shuffle offsets): never rolled.
        return x->op == y->op && same_list(x->args, y->args, false);
      }
      case NodeKind::BufferLoad: {
        auto *x = a.as<BufferLoadNode>(), *y = b.as<BufferLoadNode>();
        return same_buffer(x->buffer, y->buffer) && same_list(x->indices, y->indices, true);
      }
      default:
        return false;
    }
  }

  bool same_stmt(const Stmt& a, const Stmt& b) {
    if (!a || !b) return !a && !b;
    if (a.kind() != b.kind()) return false;
    switch (a.kind()) {
      case NodeKind::Evaluate:
        return same(a.as<EvaluateNode>()->value, b.as<EvaluateNode>()->value, false);
      case NodeKind::BufferStore: {
        auto *x = a.as<BufferStoreNode>(), *y = b.as<BufferStoreNode>();
        return same_buffer(x->buffer, y->buffer) && same_list(x->indices, y->indices, true) &&
               same(x->value, y->value, true);
      }
      case NodeKind::For: {
        auto *x = a.as<ForNode>(), *y = b.as<ForNode>();
        if (x->for_kind != y->for_kind || x->num_stages != y->num_stages || x->var.dtype() != y->var.dtype()) return false;
        if (!same(x->min, y->min, false) || !same(x->extent, y->extent, false)) return false;
        vars_[x->var.get()] = y->var.get();
        return same_stmt(x->body, y->body);
      }
      case NodeKind::IfThenElse: {
        auto *x = a.as<IfThenElseNode>(), *y = b.as<IfThenElseNode>();
        return same(x->cond, y->cond, false) && same_stmt(x->then_case, y->then_case) &&
               same_stmt(x->else_case, y->else_case);
      }
      case NodeKind::Seq: {
        auto *x = a.as<SeqNode>(), *y = b.as<SeqNode>();
        if (x->seq.size() != y->seq.size()) return false;
        for (size_t i = 0; i < x->seq.size(); ++i) {
          if (!same_stmt(x->seq[i], y->seq[i])) return false;
        }
        return true;
      }
      case NodeKind::LetStmt: {
        auto *x = a.as<LetStmtNode>(), *y = b.as<LetStmtNode>();
        if (x->var.dtype() != y->var.dtype() || !same(x->value, y->value, true)) return false;
        vars_[x->var.get()] = y->var.get();
        return same_stmt(x->body, y->body);
      }
      default:  // barriers, tile ops, while loops, loop jumps: never part of a rolled run
        return false;
    }
  }

  // ---- rebuild mode: the walk of `same` over a alone, in the same order ----
  Expr constant(const Expr& e) {
    size_t k = next_++;
    return k < replace_->size() && (*replace_)[k] ? (*replace_)[k] : e;
  }
  std::vector<Expr> re_list(const std::vector<Expr>& v) {
    std::vector<Expr> out;
    for (const Expr& e : v) out.push_back(re(e));
    return out;
  }
  Expr re(const Expr& e) {
    if (!e) return e;
    int id = ++node_;
    Expr out = re_node(e);
    auto v = virtual_ ? virtual_->find(id) : decltype(virtual_->end()){};
    if (virtual_ && v != virtual_->end()) {
      Expr c = constant(make_int(0, out.dtype()));
      if (!is_const_zero(c)) out = make_binary(BinaryOp::Add, out, c, e->loc);
    }
    return out;
  }
  static bool is_const_zero(const Expr& e) {
    auto* c = e.as<IntImmNode>();
    return c && c->value == 0;
  }
  Expr re_node(const Expr& e) {
    switch (e.kind()) {
      case NodeKind::IntImm: return constant(e);
      case NodeKind::FloatImm:
      case NodeKind::Var: return e;
      case NodeKind::Binary: {
        auto* x = e.as<BinaryNode>();
        Expr a = re(x->a);
        return make_binary(x->op, a, re(x->b), x->loc);
      }
      case NodeKind::Not: return make_not(re(e.as<NotNode>()->a), e->loc);
      case NodeKind::Select: {
        auto* x = e.as<SelectNode>();
        Expr c = re(x->cond);
        Expr t = re(x->t);
        return make_select(c, t, re(x->f), x->loc);
      }
      case NodeKind::Cast: return make_cast(e.dtype(), re(e.as<CastNode>()->value), e->loc);
      case NodeKind::Call: {
        auto* x = e.as<CallNode>();
        return make_call(x->op, re_list(x->args), x->dtype, x->loc);
      }
      case NodeKind::BufferLoad: {
        auto* x = e.as<BufferLoadNode>();
        return make_load(x->buffer, re_list(x->indices), x->loc, x->dtype.lanes);
      }
      default:
        return e;
    }
  }
  Stmt re_stmt(const Stmt& s) {
    if (!s) return s;
    switch (s.kind()) {
      case NodeKind::Evaluate: return make_evaluate(re(s.as<EvaluateNode>()->value), s->loc);
      case NodeKind::BufferStore: {
        auto* x = s.as<BufferStoreNode>();
        std::vector<Expr> idx = re_list(x->indices);
        return make_store(x->buffer, idx, re(x->value), x->loc);
      }
      case NodeKind::For: {
        auto* x = s.as<ForNode>();
        Expr mn = re(x->min);
        Expr ext = re(x->extent);
        return make_for(x->var, mn, ext, x->for_kind, re_stmt(x->body), x->num_stages, x->loc);
      }
      case NodeKind::IfThenElse: {
        auto* x = s.as<IfThenElseNode>();
        Expr c = re(x->cond);
        Stmt t = re_stmt(x->then_case);
        return make_if(c, t, re_stmt(x->else_case), x->loc);
      }
      case NodeKind::Seq: {
        std::vector<Stmt> out;
        for (const Stmt& x : s.as<SeqNode>()->seq) out.push_back(re_stmt(x));
        return make_seq(out, s->loc);
      }
      case NodeKind::LetStmt: {
        auto* x = s.as<LetStmtNode>();
        Expr v = re(x->value);
        return make_let(x->var, v, re_stmt(x->body), x->loc);
      }
      default: return s;
    }
  }
};

// Where each buffer is used, by statement of one list, and whether anywhere else.
struct Uses {
  std::map<const BufferNode*, std::pair<size_t, size_t>> span;  // first, last statement
  std::set<const BufferNode*> elsewhere;
};

void count_uses(const Stmt& s, std::map<const BufferNode*, int64_t>* counts) {
  post_order(s, [&](const Stmt& x) {
    if (auto* st = x.as<BufferStoreNode>()) ++(*counts)[st->buffer.get()];
  }, [&](const Expr& e) {
    if (auto* ld = e.as<BufferLoadNode>()) ++(*counts)[ld->buffer.get()];
  });
}

class Roller : public IRMutator {
 public:
  explicit Roller(const Kernel& k) {
    for (auto& b : k.allocs) {
      if (oversized(b)) big_.insert(b.get());
    }
    count_uses(k.body, &kernel_uses_);
  }
  bool active() const { return !big_.empty(); }

  Stmt mutate_Seq(const Stmt& self, const SeqNode* op) override {
    Stmt s = IRMutator::mutate_Seq(self, op);
    std::vector<Stmt> seq = s.as<SeqNode>() ? s.as<SeqNode>()->seq : std::vector<Stmt>{s};
    bool changed = false;
    for (int round = 0; round < 4; ++round) {  // runs of rolled loops roll again
      bool more = false;
      seq = roll(seq, &more, op->loc);
      changed |= more;
      if (!more) break;
    }
    return changed ? make_seq(seq, op->loc) : s;
  }

 private:
  bool touches_big(const Stmt& s) {
    bool found = false;
    post_order(s, [&](const Stmt& x) {
      if (auto* st = x.as<BufferStoreNode>()) found |= big_.count(st->buffer.get()) > 0;
    }, [&](const Expr& e) {
      if (auto* ld = e.as<BufferLoadNode>()) found |= big_.count(ld->buffer.get()) > 0;
    });
    return found;
  }

  // Buffers a group [s, e) of the list may have to itself.
  static bool confined(const Uses& u, const BufferNode* b, size_t s, size_t e) {
    auto it = u.span.find(b);
    return !u.elsewhere.count(b) && it != u.span.end() && it->second.first >= s && it->second.second < e;
  }

  struct Run {
    size_t period = 0, count = 0;
    std::vector<Walk> first;  // template statement j against its copy one period on
  };

  // The run starting at i that covers the most statements (count periods of `period`).
  Run find_run(const std::vector<Stmt>& seq, size_t i, const Uses& uses) {
    Run best;
    size_t n = seq.size();
    for (size_t p = 1; p <= kMaxPeriod && i + kMinCount * p <= n; ++p) {
      if (best.count * best.period >= n - i) break;
      std::vector<Walk> first(p);
      bool ok = true;
      for (size_t j = 0; j < p && ok; ++j) ok = first[j].stmt(seq[i + j], seq[i + p + j]);
      // A temporary the template shares out must be the template's own, and its stand-in
      // the next period's own.
      for (size_t j = 0; j < p && ok; ++j) {
        for (auto& [a, b] : first[j].buffers) {
          ok = ok && confined(uses, a, i, i + p) && confined(uses, b.get(), i + p, i + 2 * p);
        }
      }
      if (!ok) continue;
      size_t count = 2;
      while (i + (count + 1) * p <= n && same_again(seq, i, p, count, first, uses)) ++count;
      if (count < kMinCount || count * p <= best.count * best.period) continue;
      bool big = false;
      for (size_t j = 0; j < p && !big; ++j) big = touches_big(seq[i + j]);
      if (big) best = Run{p, count, std::move(first)};
    }
    return best;
  }

  // Period `count` of the run is the template with every constant at first + count * step.
  bool same_again(const std::vector<Stmt>& seq, size_t i, size_t p, size_t count, const std::vector<Walk>& first,
                  const Uses& uses) {
    for (size_t j = 0; j < p; ++j) {
      Walk w;
      if (!w.stmt(seq[i + j], seq[i + count * p + j]) || w.b_vals.size() != first[j].b_vals.size() ||
          w.virtual_at != first[j].virtual_at) {
        return false;
      }
      for (size_t k = 0; k < w.b_vals.size(); ++k) {
        int64_t step = first[j].b_vals[k] - first[j].a_vals[k];
        if (w.b_vals[k] != w.a_vals[k] + int64_t(count) * step) return false;
      }
      for (auto& [a, b] : w.buffers) {
        if (!first[j].buffers.count(a) || !confined(uses, b.get(), i + count * p, i + (count + 1) * p)) return false;
      }
    }
    return true;
  }

  Stmt build(const std::vector<Stmt>& seq, size_t i, const Run& run, SourceLoc loc) {
    Expr r = make_var("roll" + std::to_string(next_var_++), DataType::i32());
    std::vector<Stmt> body;
    for (size_t j = 0; j < run.period; ++j) {
      const Walk& w = run.first[j];
      std::vector<Expr> replace(w.a_vals.size());
      for (size_t k = 0; k < w.a_vals.size(); ++k) {
        int64_t first = w.a_vals[k], step = w.b_vals[k] - first;
        if (step == 0) continue;
        DataType t = w.dtypes[k];
        Expr rt = t == r.dtype() ? r : make_cast(t, r);
        Expr term = step == 1 ? rt : make_binary(BinaryOp::Mul, rt, make_int(step, t));
        replace[k] = first == 0 ? term : make_binary(BinaryOp::Add, term, make_int(first, t));
      }
      Walk re(&replace, &w.virtual_at);
      body.push_back(re.rebuild(seq[i + j]));
    }
    // The body may repeat within itself (the periods of a row inside a loop over rows).
    Stmt inner = mutate(make_seq(body, loc));
    return make_for(r, make_int(0), make_int(int64_t(run.count)), ForKind::Serial, inner, 0, loc);
  }

  std::vector<Stmt> roll(const std::vector<Stmt>& seq, bool* changed, SourceLoc loc) {
    Uses uses;
    std::map<const BufferNode*, int64_t> in_list;
    for (size_t s = 0; s < seq.size(); ++s) {
      std::map<const BufferNode*, int64_t> counts;
      count_uses(seq[s], &counts);
      for (auto& [b, n] : counts) {
        auto [it, fresh] = uses.span.emplace(b, std::make_pair(s, s));
        if (!fresh) it->second.second = s;
        in_list[b] += n;
      }
    }
    for (auto& [b, n] : in_list) {
      auto it = kernel_uses_.find(b);
      if (it == kernel_uses_.end() || n < it->second) uses.elsewhere.insert(b);
    }
    std::vector<Stmt> out;
    for (size_t i = 0; i < seq.size();) {
      Run run = find_run(seq, i, uses);
      if (run.count == 0) {
        out.push_back(seq[i++]);
        continue;
      }
      out.push_back(build(seq, i, run, loc));
      i += run.count * run.period;
      *changed = true;
    }
    return out;
  }

  std::set<const BufferNode*> big_;
  std::map<const BufferNode*, int64_t> kernel_uses_;
  int next_var_ = 0;
};

}  // namespace

void roll_loops(Kernel& k, PassContext&) {
  Roller roller(k);
  if (!roller.active()) return;
  std::map<const BufferNode*, int64_t> before;
  count_uses(k.body, &before);
  k.body = roller.mutate(k.body);
  // The temporaries of the periods after the first are gone with them.
  std::map<const BufferNode*, int64_t> after;
  count_uses(k.body, &after);
  std::vector<Buffer> allocs;
  for (auto& b : k.allocs) {
    if (b->scope == Scope::Local && before.count(b.get()) && !after.count(b.get())) continue;
    allocs.push_back(b);
  }
  k.allocs = allocs;
}

}  // namespace tegula::transform
