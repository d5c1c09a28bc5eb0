#include "ir/thread_guard.h"

#include <algorithm>

#include "ir/analyzer.h"
#include "ir/functor.h"

namespace tegula::ir {

namespace {

class Reads : public IRVisitor {
 public:
  explicit Reads(std::function<bool(const Expr&)> hit) : hit_(std::move(hit)) {}
  bool found = false;
  void visit(const Expr& e) override {
    if (found || !e) return;
    if (hit_(e)) {
      found = true;
      return;
    }
    IRVisitor::visit(e);
  }

 private:
  std::function<bool(const Expr&)> hit_;
};

bool reads_any(const Expr& e, std::function<bool(const Expr&)> hit) {
  Reads r(std::move(hit));
  r.visit(e);
  return r.found;
}

// eval_int has no logical not: `not c` becomes `c == 0`.
class NotAsCompare : public IRMutator {
 public:
  Expr mutate_Not(const Expr&, const NotNode* op) override {
    return make_binary(BinaryOp::EQ, mutate(op->a), make_int(0, op->a.dtype()));
  }
};

void conjuncts(const Expr& e, std::vector<Expr>* out) {
  auto* b = e.as<BinaryNode>();
  if (b && b->op == BinaryOp::And) {
    conjuncts(b->a, out);
    conjuncts(b->b, out);
    return;
  }
  out->push_back(e);
}

}  // namespace

bool thread_private_nest(const Stmt& s) {
  bool local_only = true;
  post_order(s, [&](const Stmt& x) {
    if (auto* st = x.as<BufferStoreNode>()) local_only &= st->buffer->scope == Scope::Local;
    if (x.as<EvaluateNode>() || x.as<TileOpNode>() || x.as<SyncNode>()) local_only = false;
  }, [&](const Expr& e) {
    if (auto* ld = e.as<BufferLoadNode>()) local_only &= ld->buffer->scope != Scope::Fragment;
    // T.atomic_add(..., return_prev=True) stored into a thread's variable adds to memory.
    if (auto* c = e.as<CallNode>()) local_only &= c->op != "atomic_add";
  });
  return local_only;
}

bool reads_var(const Expr& e, const Expr& v) {
  return reads_any(e, [&](const Expr& x) { return x.same_as(v); });
}

GuardSplit split_guard(const Expr& cond0, const Expr& tx, ThreadRange outer,
                       const std::vector<std::pair<Expr, Expr>>& lets) {
  Expr cond = cond0;
  // Later lets may be defined through earlier ones: substitute innermost first.
  for (auto it = lets.rbegin(); it != lets.rend(); ++it) cond = substitute(cond, {*it});
  GuardSplit out;
  out.takes.assign(size_t(std::max<int64_t>(outer.count(), 0)), true);
  std::vector<Expr> parts;
  conjuncts(cond, &parts);
  for (const Expr& c : parts) {
    if (!reads_var(c, tx)) {
      out.uniform = out.uniform ? (out.uniform && c) : c;
      continue;
    }
    out.reads_thread = true;
    Expr pred = NotAsCompare().mutate(c);
    for (int64_t t = outer.lo; t < outer.hi; ++t) {
      int64_t v = 0;
      if (!eval_int(pred, VarValues{{tx.get(), t}}, &v)) {
        out.evaluable = false;
        return out;
      }
      if (!v) out.takes[size_t(t - outer.lo)] = false;
    }
  }
  return out;
}

std::optional<ThreadRange> contiguous_range(const std::vector<bool>& takes, ThreadRange outer, bool value) {
  int64_t first = -1, last = -1;
  for (size_t i = 0; i < takes.size(); ++i) {
    if (takes[i] != value) continue;
    if (first < 0) first = int64_t(i);
    else if (last != int64_t(i) - 1) return std::nullopt;
    last = int64_t(i);
  }
  if (first < 0) return ThreadRange{outer.lo, outer.lo};
  return ThreadRange{outer.lo + first, outer.lo + last + 1};
}

bool pure_call(const std::string& op) {
  static const std::set<std::string> names = {
      "exp", "exp2", "exp10", "log", "log2", "log10", "log1p", "expm1", "sqrt", "rsqrt", "tanh", "sin", "cos",
      "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "erf", "floor", "ceil", "trunc", "rint", "round",
      "abs", "fabs", "sigmoid", "infinity", "ninfinity", "max_value", "min_value", "max", "min", "max_num",
      "min_num", "pow", "fmod", "isfinite", "isinf", "isnan", "clz", "popcount", "if_then_else"};
  return names.count(op) > 0;
}

bool Uniformity::uniform_impl(const Expr& e, const std::set<const ExprNode*>& same, ThreadRange in) const {
  // A local buffer stored under a range of threads partly inside `in` differs within it.
  auto split_by_stores = [&](const BufferNode* b) {
    auto it = store_ranges_.find(b);
    if (it == store_ranges_.end()) return false;
    for (const ThreadRange& r : it->second) {
      bool covers = r.lo <= in.lo && in.hi <= r.hi, apart = r.hi <= in.lo || in.hi <= r.lo;
      if (!covers && !apart) return true;
    }
    return false;
  };
  return !reads_any(e, [&](const Expr& x) {
    if (varying_.count(x.get()) && !same.count(x.get())) return true;
    // Each thread's own draw, the lanes running a call, an atomic's previous value, the side
    // of a warp-specialised split: they differ with no argument that does.
    if (auto* c = x.as<CallNode>(); c && (c->op.rfind("rng_", 0) == 0 || c->op.rfind("atomic_", 0) == 0 ||
                                          c->op == "activemask" || c->op == "ws_producer" || c->op == "ws_leader")) {
      return true;
    }
    auto* ld = x.as<BufferLoadNode>();
    if (!ld) return false;
    if (ld->buffer->scope == Scope::Fragment) {
      return !whole_fragments_.count(ld->buffer.get()) || varying_locals_.count(ld->buffer.get());
    }
    return (ld->buffer->scope == Scope::Local &&
            (!locals_known_ || varying_locals_.count(ld->buffer.get()) || split_by_stores(ld->buffer.get())));
  });
}

namespace {

// One pass of Uniformity::learn: marks what the stores of s make varying; true when it
// marked something new.
class LearnVarying : public IRVisitor {
 public:
  LearnVarying(Uniformity& u, std::set<const ExprNode*>& vars, std::set<const BufferNode*>& locals,
               std::map<const BufferNode*, std::vector<ThreadRange>>& store_ranges, bool lowered)
      : u_(u), vars_(vars), locals_(locals), store_ranges_(store_ranges), range_{0, u.threads()}, lowered_(lowered) {}
  bool changed = false;

  void visit_Call(const CallNode* op) override {
    // Lowered code: a register array passed to a call may be written through its address.
    if (lowered_ && !pure_call(op->op)) {
      for (const Expr& a : op->args) {
        reads_any(a, [&](const Expr& x) {
          auto* ld = x.as<BufferLoadNode>();
          if (ld && ld->buffer->scope == Scope::Local && locals_.insert(ld->buffer.get()).second) changed = true;
          return false;
        });
      }
    }
    IRVisitor::visit_Call(op);
  }

  void visit_LetStmt(const LetStmtNode* op) override {
    if (varying_ || !u_.uniform(op->value)) mark(op->var.get());
    IRVisitor::visit_LetStmt(op);
  }
  void visit_For(const ForNode* op) override {
    bool saved = varying_;
    // A thread-private T.Parallel nest runs whole in every thread, like a serial loop.
    bool divided = op->for_kind == ForKind::Parallel && !thread_private_nest(op->body);
    if (divided || !u_.uniform(op->min) || !u_.uniform(op->extent)) {
      mark(op->var.get());
      varying_ |= divided;
    }
    bool saved_control = control_varying_;
    control_varying_ |= !divided && varying_;
    if (divided) parallel_vars_.insert(op->var.get());
    IRVisitor::visit_For(op);
    if (divided) parallel_vars_.erase(op->var.get());
    control_varying_ = saved_control;
    varying_ = saved;
  }
  void visit_IfThenElse(const IfThenElseNode* op) override {
    bool saved = varying_, saved_control = control_varying_;
    control_varying_ |= !u_.uniform_given(op->cond, parallel_vars_);
    // A branch that selects ranges of threads by the thread index: each side's stores are
    // the same in the threads of its range (the branch in the uniformity's ranges).
    std::optional<ThreadRange> then_r, else_r;
    if (u_.threads() > 0 && !varying_ && reads_var(op->cond, u_.thread_var())) {
      GuardSplit g = split_guard(op->cond, u_.thread_var(), range_, {});
      if (g.evaluable && (!g.uniform || u_.uniform(g.uniform))) {
        then_r = contiguous_range(g.takes, range_, true);
        else_r = contiguous_range(g.takes, range_, false);
      }
    }
    if (!then_r || (op->else_case && !else_r)) {
      varying_ |= !u_.uniform(op->cond);
      IRVisitor::visit_IfThenElse(op);
    } else {
      ThreadRange saved_range = range_;
      range_ = *then_r;
      visit(op->then_case);
      range_ = else_r ? *else_r : saved_range;
      if (op->else_case) visit(op->else_case);
      range_ = saved_range;
    }
    varying_ = saved;
    control_varying_ = saved_control;
  }
  void visit_BufferStore(const BufferStoreNode* op) override {
    // A fragment held whole: a T.Parallel nest over it runs whole in every thread, so its
    // variables are the same in all of them; only other differences count.
    if (u_.whole_fragments().count(op->buffer.get()) && !locals_.count(op->buffer.get())) {
      bool differs = control_varying_ || !u_.uniform_given(op->value, parallel_vars_);
      for (const Expr& i : op->indices) differs |= !u_.uniform_given(i, parallel_vars_);
      if (differs) locals_.insert(op->buffer.get()), changed = true;
    }
    if (op->buffer->scope == Scope::Local && !locals_.count(op->buffer.get())) {
      bool differs = varying_ || !u_.uniform(op->value);
      for (const Expr& i : op->indices) differs |= !u_.uniform(i);
      if (differs) locals_.insert(op->buffer.get()), changed = true;
      auto& ranges = store_ranges_[op->buffer.get()];
      if (!differs && u_.threads() > 0 && std::find(ranges.begin(), ranges.end(), range_) == ranges.end()) {
        ranges.push_back(range_), changed = true;
      }
    }
    IRVisitor::visit_BufferStore(op);
  }
  void visit_TileOp(const TileOpNode* op) override {
    // A tile op writing a local buffer (T.fill, T.copy into it) fills each thread's copy alike
    // unless its values or region differ between threads.
    bool differs = varying_;
    for (const Expr& a : op->args) differs |= !u_.uniform(a);
    for (auto& r : op->regions) {
      for (const Expr& m : r.mins) differs |= !u_.uniform(m);
      if (r.buffer->scope == Scope::Fragment && !u_.whole_fragments().count(r.buffer.get())) differs = true;
    }
    // The op's destination is its last region (copy, fill, reduce, gemm).
    const BufferNode* dst = op->regions.empty() ? nullptr : op->regions.back().buffer.get();
    bool held_alike = dst && (dst->scope == Scope::Local || u_.whole_fragments().count(dst));
    if (held_alike && differs && !locals_.count(dst)) locals_.insert(dst), changed = true;
    if (held_alike && !differs && dst->scope == Scope::Local && u_.threads() > 0) {
      auto& ranges = store_ranges_[dst];
      if (std::find(ranges.begin(), ranges.end(), range_) == ranges.end()) ranges.push_back(range_), changed = true;
    }
    IRVisitor::visit_TileOp(op);
  }

 private:
  void mark(const ExprNode* v) {
    if (vars_.insert(v).second) changed = true;
  }
  Uniformity& u_;
  std::set<const ExprNode*>& vars_;
  std::set<const BufferNode*>& locals_;
  std::map<const BufferNode*, std::vector<ThreadRange>>& store_ranges_;
  ThreadRange range_;  // the threads that run the statement visited now
  bool lowered_;
  bool varying_ = false;
  bool control_varying_ = false;  // varying_ but for the division of T.Parallel nests
  std::set<const ExprNode*> parallel_vars_;
};

// Collects fragment accesses outside T.Parallel nests; tile ops' regions do not count.
class OutsideNests : public IRVisitor {
 public:
  std::map<const BufferNode*, SourceLoc> found;
  void visit_For(const ForNode* op) override {
    if (op->for_kind != ForKind::Parallel) IRVisitor::visit_For(op);
  }
  void visit_BufferLoad(const BufferLoadNode* op) override {
    if (op->buffer->scope == Scope::Fragment) found.emplace(op->buffer.get(), op->loc);
    IRVisitor::visit_BufferLoad(op);
  }
  void visit_BufferStore(const BufferStoreNode* op) override {
    if (op->buffer->scope == Scope::Fragment) found.emplace(op->buffer.get(), op->loc);
    IRVisitor::visit_BufferStore(op);
  }
};

}  // namespace

std::map<const BufferNode*, SourceLoc> fragments_held_whole(const Stmt& body) {
  OutsideNests v;
  v.visit(body);
  return v.found;
}

namespace {

void learn_to_fixed_point(Uniformity& u, std::set<const ExprNode*>& vars, std::set<const BufferNode*>& locals,
                          std::map<const BufferNode*, std::vector<ThreadRange>>& store_ranges, const Stmt& body,
                          bool lowered) {
  while (true) {
    LearnVarying pass(u, vars, locals, store_ranges, lowered);
    pass.visit(body);
    if (!pass.changed) return;
  }
}

}  // namespace

void Uniformity::learn(const Stmt& body) {
  locals_known_ = true;
  whole_fragments_ = fragments_held_whole(body);
  learn_to_fixed_point(*this, varying_, varying_locals_, store_ranges_, body, false);
}

void Uniformity::learn_lowered(const Stmt& body) {
  locals_known_ = true;
  whole_fragments_.clear();
  learn_to_fixed_point(*this, varying_, varying_locals_, store_ranges_, body, true);
}

std::optional<ThreadRange> thread_scope_range(const Expr& value) {
  auto* c = value.as<CallNode>();
  if (!c || c->op != kThreadScope || c->args.size() != 3) return std::nullopt;
  const int64_t* lo = as_const_int(c->args[1]);
  const int64_t* n = as_const_int(c->args[2]);
  if (!lo || !n) return std::nullopt;
  return ThreadRange{*lo, *lo + *n};
}

}  // namespace tegula::ir
