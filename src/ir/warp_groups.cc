#include "ir/warp_groups.h"

#include <algorithm>
#include <optional>

#include "ir/functor.h"
#include "ir/thread_guard.h"

namespace tegula::ir {

namespace {

// A branch with no else whose condition selects, by the thread index alone, one range of
// whole warps; and that range.
struct Guard {
  ThreadRange range;
  Stmt stmt;
};

std::optional<ThreadRange> guard_range(const Stmt& s, const Expr& tx, int64_t threads) {
  auto* op = s.as<IfThenElseNode>();
  if (!op || op->else_case || !reads_var(op->cond, tx)) return std::nullopt;
  ThreadRange block{0, threads};
  GuardSplit g = split_guard(op->cond, tx, block, {});
  if (!g.reads_thread || !g.evaluable || g.uniform) return std::nullopt;
  auto r = contiguous_range(g.takes, block, true);
  if (!r || r->count() == 0 || r->lo % 32 != 0 || r->count() % 32 != 0) return std::nullopt;
  return r;
}

bool disjoint_or_equal(const ThreadRange& a, const ThreadRange& b) { return a == b || a.hi <= b.lo || b.hi <= a.lo; }

// The distinct ranges of guards, by their first thread; empty unless they are at least
// two and pairwise disjoint or equal.
std::vector<ThreadRange> distinct_ranges(const std::vector<Guard>& gs) {
  std::vector<ThreadRange> out;
  for (const Guard& g : gs) {
    for (const ThreadRange& r : out) {
      if (!disjoint_or_equal(r, g.range)) return {};
    }
    if (std::find(out.begin(), out.end(), g.range) == out.end()) out.push_back(g.range);
  }
  if (out.size() < 2) return {};
  std::sort(out.begin(), out.end(), [](const ThreadRange& a, const ThreadRange& b) { return a.lo < b.lo; });
  return out;
}

// Whether s holds a break or continue of the loop whose body it is.
bool jumps(const Stmt& s) {
  struct Finder : IRVisitor {
    bool found = false;
    void visit_LoopJump(const LoopJumpNode*) override { found = true; }
    void visit_For(const ForNode*) override {}
    void visit_While(const WhileNode*) override {}
  } f;
  f.visit(s);
  return f.found;
}

Stmt seq_of(const std::vector<Stmt>& stmts, const SourceLoc& loc) {
  return stmts.size() == 1 ? stmts[0] : make_seq(stmts, loc);
}

class Apart : public IRMutator {
 public:
  Apart(Expr tx, int64_t threads) : tx_(std::move(tx)), threads_(threads) {}

  Stmt mutate_Seq(const Stmt& self, const SeqNode* op) override {
    std::vector<Stmt> stmts;
    bool changed = false;
    for (const Stmt& s : op->seq) {
      stmts.push_back(mutate(s));
      changed |= !stmts.back().same_as(s);
    }
    std::vector<Stmt> out;
    std::vector<Guard> run;
    auto flush = [&] {
      if (distinct_ranges(run).empty()) {
        for (const Guard& g : run) out.push_back(g.stmt);
      } else {
        out.push_back(chain(run, run[0].stmt->loc));
        changed = true;
      }
      run.clear();
    };
    for (const Stmt& s : stmts) {
      auto r = guard_range(s, tx_, threads_);
      if (!r) {
        flush();
        out.push_back(s);
        continue;
      }
      bool fits = std::all_of(run.begin(), run.end(), [&](const Guard& g) { return disjoint_or_equal(g.range, *r); });
      if (!fits) flush();
      run.push_back({*r, s});
    }
    flush();
    return changed ? seq_of(out, op->loc) : self;
  }

  Stmt mutate_For(const Stmt& self, const ForNode* op) override {
    if (op->for_kind != ForKind::Serial && op->for_kind != ForKind::Unrolled) return IRMutator::mutate_For(self, op);
    std::vector<const LetStmtNode*> lets;
    Stmt inner = op->body;
    while (auto* l = inner.as<LetStmtNode>()) lets.push_back(l), inner = l->body;
    auto* seq = inner.as<SeqNode>();
    std::vector<Guard> guards;
    for (const Stmt& s : seq ? seq->seq : std::vector<Stmt>{inner}) {
      auto r = guard_range(s, tx_, threads_);
      if (!r) return IRMutator::mutate_For(self, op);
      guards.push_back({*r, s});
    }
    std::vector<ThreadRange> ranges = distinct_ranges(guards);
    if (ranges.empty() || jumps(op->body)) return IRMutator::mutate_For(self, op);
    // One loop per range, inside that range's first branch (the others' bodies follow
    // its own, in order), with a fresh loop variable and fresh lets.
    std::vector<Guard> loops;
    for (const ThreadRange& r : ranges) {
      const IfThenElseNode* first = nullptr;
      std::vector<Stmt> bodies;
      for (const Guard& g : guards) {
        if (!(g.range == r)) continue;
        auto* branch = g.stmt.as<IfThenElseNode>();
        if (!first) first = branch;
        bodies.push_back(branch->then_case);
      }
      std::vector<std::pair<Expr, Expr>> fresh{{op->var, rename(op->var)}};
      std::vector<Expr> values;
      for (const LetStmtNode* l : lets) {
        values.push_back(substitute(l->value, fresh));
        fresh.push_back({l->var, rename(l->var)});
      }
      Stmt body = mutate(substitute(seq_of(bodies, op->body->loc), fresh));
      for (size_t i = lets.size(); i-- > 0;) body = make_let(fresh[i + 1].second, values[i], body, lets[i]->loc);
      Stmt loop = make_for(fresh[0].second, op->min, op->extent, op->for_kind, body, op->num_stages, op->loc);
      loops.push_back({r, make_if(first->cond, loop, Stmt(), op->loc)});
    }
    return chain(loops, op->loc);
  }

 private:
  static Expr rename(const Expr& var) {
    return make_var(var.as<VarNode>()->name, var.dtype(), var->loc);
  }

  // Guards of pairwise disjoint-or-equal ranges as one if/else chain, split by the thread
  // index at each range's end: the sides of an if/else run side by side.
  Stmt chain(const std::vector<Guard>& gs, const SourceLoc& loc) const {
    std::vector<ThreadRange> ranges = distinct_ranges(gs);
    Stmt out;
    for (size_t i = ranges.size(); i-- > 0;) {
      std::vector<Stmt> mine;
      for (const Guard& g : gs) {
        if (g.range == ranges[i]) mine.push_back(g.stmt);
      }
      Stmt group = seq_of(mine, loc);
      out = out ? make_if(make_binary(BinaryOp::LT, tx_, make_int(ranges[i].hi), loc), group, out, loc) : group;
    }
    return out;
  }

  Expr tx_;
  int64_t threads_;
};

}  // namespace

bool uses_mbarriers(const Stmt& body) {
  bool found = false;
  post_order(body, [](const Stmt&) {}, [&](const Expr& e) {
    auto* c = e.as<CallNode>();
    found |= c && c->op.rfind("mbar_", 0) == 0;
  });
  return found;
}

Stmt run_warp_groups_apart(const Stmt& body, const Expr& tx, int64_t threads) {
  if (!tx || !body || !uses_mbarriers(body)) return body;
  return Apart(tx, threads).mutate(body);
}

}  // namespace tegula::ir
