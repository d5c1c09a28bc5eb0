// Pass: partition_loops.
//
// Expects: a layout for every outermost T.Parallel nest and every fragment (infer_layout);
// ctx.registers maps each fragment to its register array.
// Guarantees: no Parallel loop is left. Each nest becomes per-thread straight-line code,
// one copy of the body per slot the loop layout gives a thread, where
//   - loop variables are formulas of the thread index (simplified),
//   - fragment accesses are register accesses at constant indices (checked for every
//     thread: a thread must own what it touches, in the same register as all others),
//   - global accesses past a tensor's edge are masked: loads give 0, stores and atomics
//     are skipped; loads nested in another access's indices included, and so are the
//     accesses of the code outside the nests,
//   - contiguous, aligned global/shared accesses of consecutive slots become one vector
//     access of up to 16 bytes (vectorize.cc); a 16-byte global->shared copy inside a
//     T.Pipelined loop, or ahead of one in the same block, becomes cp.async (left
//     uncommitted: pipeline_loops groups and waits for it).
#include "transform/partition.h"

#include <map>
#include <optional>
#include <set>

#include "ir/functor.h"
#include "ir/thread_guard.h"
#include "ir/wide_access.h"
#include "transform/passes.h"

namespace tegula::transform {

using namespace ir;

namespace {

// The row-major index of element idx of a fragment of constant shape.
Expr row_major_index(const Buffer& frag, const std::vector<Expr>& idx) {
  Expr out;
  for (size_t d = 0; d < idx.size(); ++d) {
    out = out ? make_binary(BinaryOp::Add, make_binary(BinaryOp::Mul, out, frag->shape[d]), idx[d]) : idx[d];
  }
  return out ? out : make_int(0);
}

// Replaces fragment accesses of one slot by register accesses. A fragment may also be
// indexed by variables of the loops around the nest (lse[k, j] in `for k in T.serial(S):
// for j in T.Parallel(128):`): when every thread holds the elements it needs for each
// value of them, in registers at an affine function of them, the register index is that
// function (`an` gives their ranges).
class FragmentToRegister : public IRMutator {
 public:
  FragmentToRegister(const NestInfo& n, int slot, PassContext& ctx, const Analyzer& an)
      : n_(n), slot_(slot), ctx_(ctx), an_(an) {}

  Expr mutate_BufferLoad(const Expr& self, const BufferLoadNode* op) override {
    Expr e = IRMutator::mutate_BufferLoad(self, op);
    auto* load = e.as<BufferLoadNode>();
    if (load->buffer->scope != Scope::Fragment) return e;
    // Held whole by every thread: any element is at its row-major index, whatever the
    // loop's layout (stores still take the check below: every copy must be written).
    if (ctx_.layouts.fragment.at(load->buffer.get())->whole_in_every_thread()) {
      return make_load(reg(load->buffer), {row_major_index(load->buffer, load->indices)}, op->loc);
    }
    return make_load(reg(load->buffer), {slot_for(load->buffer, load->indices, op->loc)}, op->loc);
  }
  Stmt mutate_BufferStore(const Stmt& self, const BufferStoreNode* op) override {
    Stmt s = IRMutator::mutate_BufferStore(self, op);
    auto* st = s.as<BufferStoreNode>();
    if (st->buffer->scope != Scope::Fragment) return s;
    return make_store(reg(st->buffer), {slot_for(st->buffer, st->indices, op->loc, true)}, st->value, op->loc);
  }

 private:
  Buffer reg(const Buffer& frag) { return ctx_.registers.at(frag.get()); }

  Expr slot_for(const Buffer& frag, const std::vector<Expr>& idx, const SourceLoc& loc, bool store = false) {
    auto layout = ctx_.layouts.fragment.at(frag.get());
    bool identity = idx.size() == n_.vars.size();
    for (size_t k = 0; identity && k < idx.size(); ++k) identity = idx[k].same_as(n_.vars[k]);
    if (identity && layout.get() == n_.layout.get()) return make_int(slot_);
    // The variables of the index that are not the nest's: loops around it.
    std::vector<Expr> outer;
    std::set<const ExprNode*> mine;
    for (auto& v : n_.vars) mine.insert(v.get());
    for (auto& i : idx) {
      post_order(make_evaluate(i), nullptr, [&](const Expr& x) {
        if (x.as<VarNode>() && !mine.count(x.get())) {
          for (auto& o : outer) {
            if (o.same_as(x)) return;
          }
          outer.push_back(x);
        }
      });
    }
    if (outer.empty()) return make_int(slot_at(frag, idx, loc, store, {}));
    // Every value of the outer variables (a few hundred at most): the slots must be an
    // affine function of them.
    std::vector<Interval> range;
    int64_t combos = 1;
    for (auto& v : outer) {
      Interval iv = an_.bound(v);
      user_assert(iv.lo > -(int64_t(1) << 20) && iv.hi < (int64_t(1) << 20) && (combos *= iv.hi - iv.lo + 1) <= 1024,
                  loc)
          << "fragment '" << frag->name << "' is indexed by '" << v.as<VarNode>()->name
          << "', which is neither a variable of this T.Parallel loop nor one of a loop around it with a constant "
          << "range (at most 1024 values); its register could not be known";
      range.push_back(iv);
    }
    auto at = [&](const std::vector<int64_t>& values) {
      VarValues vals;
      for (size_t i = 0; i < outer.size(); ++i) vals[outer[i].get()] = values[i];
      return slot_at(frag, idx, loc, store, vals);
    };
    std::vector<int64_t> lo(outer.size());
    for (size_t i = 0; i < outer.size(); ++i) lo[i] = range[i].lo;
    int64_t base = at(lo);
    std::vector<int64_t> step(outer.size(), 0);
    for (size_t i = 0; i < outer.size(); ++i) {
      if (range[i].hi == range[i].lo) continue;
      std::vector<int64_t> v = lo;
      ++v[i];
      step[i] = at(v) - base;
    }
    std::vector<int64_t> v = lo;
    for (int64_t c = 0; c < combos; ++c) {
      int64_t want = base;
      for (size_t i = 0; i < outer.size(); ++i) want += step[i] * (v[i] - lo[i]);
      user_assert(at(v) == want, loc)
          << "fragment '" << frag->name << "': the registers holding the elements this T.Parallel loop needs are "
          << "not an affine function of the variables of the loops around it; index it by the loop's own "
          << "variables";
      for (size_t i = outer.size(); i-- > 0;) {
        if (++v[i] <= range[i].hi) break;
        v[i] = range[i].lo;
      }
    }
    Expr slot = make_int(base);
    for (size_t i = 0; i < outer.size(); ++i) {
      if (step[i]) slot = slot + (outer[i] - make_int(lo[i])) * make_int(step[i]);
    }
    return an_.simplify(slot);
  }

  // With a store, also checks that every copy of each element written is written: a
  // thread holding a copy that does not run the iteration would keep a stale value.
  int slot_at(const Buffer& frag, const std::vector<Expr>& idx, const SourceLoc& loc, bool store,
              const VarValues& outer) {
    auto layout = ctx_.layouts.fragment.at(frag.get());
    const auto& L = *n_.layout;
    std::vector<int64_t> c(n_.vars.size()), fc(idx.size());
    VarValues values = outer;
    std::map<int64_t, int> writers;  // element -> threads writing it in this slot
    int found = -1;
    for (int t = 0; t < L.threads(); ++t) {
      if (!L.coords(t, slot_, c.data())) continue;
      for (size_t k = 0; k < c.size(); ++k) values[n_.vars[k].get()] = c[k];
      bool inside = true;
      for (size_t k = 0; k < idx.size(); ++k) {
        user_assert(eval_int(idx[k], values, &fc[k]), loc)
            << "fragment '" << frag->name
            << "' must be indexed by the T.Parallel loop variables, variables of the loops around it and constants";
        inside = inside && fc[k] >= 0 && fc[k] < layout->shape()[k];
      }
      // Past the fragment's edge: an iteration the program masks off (acc[i + 16, j]
      // under `if i < 16`); the threads that do read give the register.
      if (!inside) continue;
      int s = layout->slot_of(t, layout->flatten(fc.data()));
      user_assert(s >= 0 && (found < 0 || found == s), loc)
          << "layout conflict: in this T.Parallel loop (layout " << L.describe() << ") thread " << t
          << (s < 0 ? " does not hold" : " holds in another register") << " the element of fragment '" << frag->name
          << "' it needs (its layout: " << layout->describe() << ")";
      found = s;
      if (store) ++writers[layout->flatten(fc.data())];
    }
    for (auto& [flat, count] : writers) {
      user_assert(count >= layout->holders(flat), loc)
          << "this T.Parallel loop (layout " << L.describe() << ") writes an element of fragment '" << frag->name
          << "' in " << count << " thread(s), but " << layout->holders(flat) << " threads hold copies of it (its layout: "
          << layout->describe() << "); index the fragment by the loop's variables so that every copy is updated";
    }
    return found < 0 ? 0 : found;
  }

  const NestInfo& n_;
  int slot_;
  PassContext& ctx_;
  const Analyzer& an_;
};

// Global accesses outside the tensor: loads give 0, stores and atomics are skipped. Every
// global access is guarded, wherever it sits: a load inside another access's index
// (C[Pos[s], i]), in a condition, in either arm of a select. An index is masked before
// the access it addresses is tested, so the test itself never reads past an edge.
//
// The masks of the code outside the T.Parallel nests, and of the loads inside the indices
// of a vector access, an atomic's address or a bulk copy's coordinates, leave out what the
// facts around them imply: a kernel that guards its own accesses (if tile < M:
// TileMap[tile, 0] = e) is not guarded twice. The other masks of a nest's accesses are
// decided by the loop ranges alone (which keeps the code of kernels those masks served).
class MaskGlobal : public IRMutator {
 public:
  // scalar: the code outside the T.Parallel nests.
  MaskGlobal(const Analyzer& an, Facts* facts, bool scalar = false)
      : an_(an), facts_(facts), by_facts_(scalar), outside_nests_(scalar) {}

  Expr mutate_BufferLoad(const Expr& self, const BufferLoadNode* op) override {
    std::vector<Expr> idx = mask_indices(op->indices);
    Expr e = same(idx, op->indices) ? self : make_load(op->buffer, idx, op->loc, op->dtype.lanes);
    if (op->buffer->scope != Scope::Global) return e;
    // A vector the program wrote (a slice of T.reinterpret's lanes) is masked whole; the
    // nests' vectors are whole rows the vectoriser proved inside or outside together.
    Expr cond = outside_nests_ && op->dtype.lanes > 1 ? wide_guard(e.as<BufferLoadNode>()) : guard(op->buffer, idx);
    if (!cond) return e;
    return make_select(cond, e, make_cast(op->dtype, make_int(0)), op->loc);
  }
  Stmt mutate_BufferStore(const Stmt& self, const BufferStoreNode* op) override {
    std::vector<Expr> idx = mask_indices(op->indices);
    Expr value = mutate(op->value);
    Stmt s = same(idx, op->indices) && value.same_as(op->value) ? self : make_store(op->buffer, idx, value, op->loc);
    if (op->buffer->scope != Scope::Global) return s;
    int lanes = value.dtype().lanes;
    Expr cond = outside_nests_ && lanes > 1 ? wide_guard(make_load(op->buffer, idx, op->loc, lanes).as<BufferLoadNode>())
                                            : guard(op->buffer, idx);
    return cond ? make_if(cond, s, {}, op->loc) : s;
  }
  // An explicit-width load (ldst.h) past the edge, even in part, reads nothing and gives 0:
  // the mask joins its predicate.
  Expr mutate_Call(const Expr& self, const CallNode* op) override {
    if (op->op == "atomic_add") {
      // An atomic add as an expression (return_prev): its address is masked, not read; past
      // the edge nothing is added and it gives 0.
      auto* addr = op->args[0].as<BufferLoadNode>();
      std::vector<Expr> args = op->args;
      std::vector<Expr> idx = mask_indices(addr->indices, true);
      args[0] = make_load(addr->buffer, idx, addr->loc, addr->dtype.lanes);
      for (size_t i = 1; i < args.size(); ++i) args[i] = mutate(op->args[i]);
      Expr e = make_call(op->op, std::move(args), op->dtype, op->loc);
      Expr cond = addr->buffer->scope == Scope::Global ? guard(addr->buffer, idx) : Expr();
      return cond ? make_select(cond, e, make_cast(op->dtype, make_int(0)), op->loc) : e;
    }
    auto w = wide_access(op);
    if (!w || w->store) return IRMutator::mutate_Call(self, op);
    std::vector<Expr> args{masked_address(*w)};
    Expr pred = w->pred ? mutate(w->pred) : Expr();
    Expr cond = w->addr->buffer->scope == Scope::Global ? wide_guard(args[0].as<BufferLoadNode>()) : Expr();
    if (cond) pred = bool(pred) ? (pred && cond) : cond;
    if (pred) args.push_back(pred);
    return make_call(op->op, std::move(args), op->dtype, op->loc);
  }
  Stmt mutate_Evaluate(const Stmt& self, const EvaluateNode* op) override {
    auto* call = op->value.as<CallNode>();
    if (auto w = call ? wide_access(call) : std::nullopt; w && w->store) {
      // A store past the edge, even in part, is skipped.
      std::vector<Expr> args{masked_address(*w), mutate(w->value)};
      if (w->pred) args.push_back(mutate(w->pred));
      Expr cond = w->addr->buffer->scope == Scope::Global ? wide_guard(args[0].as<BufferLoadNode>()) : Expr();
      Stmt s = make_evaluate(make_call(call->op, std::move(args), call->dtype, call->loc), op->loc);
      return cond ? make_if(cond, s, {}, op->loc) : s;
    }
    if (call && call->op == "tma_copy") {
      // The copy engine fills a box past the tensor's edge with 0; only loads inside its
      // coordinates (a paged cache's block table) need masks.
      auto* src = call->args[1].as<BufferLoadNode>();
      std::vector<Expr> args = call->args;
      args[1] = make_load(src->buffer, mask_indices(src->indices, true), src->loc, src->dtype.lanes);
      return make_evaluate(make_call(call->op, std::move(args), call->dtype, call->loc), op->loc);
    }
    if (!call || call->op != "atomic_add") return IRMutator::mutate_Evaluate(self, op);
    // The first argument is the address: its indices are masked, the element is not read.
    auto* addr = call->args[0].as<BufferLoadNode>();
    std::vector<Expr> args = call->args;
    std::vector<Expr> idx = mask_indices(addr->indices, true);
    args[0] = make_load(addr->buffer, idx, addr->loc, addr->dtype.lanes);
    for (size_t i = 1; i < args.size(); ++i) args[i] = mutate(call->args[i]);
    Stmt s = make_evaluate(make_call("atomic_add", std::move(args), call->dtype, call->loc), op->loc);
    Expr cond = addr->buffer->scope == Scope::Global ? guard(addr->buffer, idx) : Expr();
    return cond ? make_if(cond, s, {}, op->loc) : s;
  }

  // Where a condition is known true (an if's then-branch, a select's first arm, the right
  // side of &&), it joins the facts.
  Stmt mutate_IfThenElse(const Stmt& self, const IfThenElseNode* op) override {
    Expr cond = mutate(op->cond);
    Stmt then_case = assuming(op->cond, [&] { return mutate(op->then_case); });
    Stmt else_case = op->else_case ? mutate(op->else_case) : Stmt();
    if (cond.same_as(op->cond) && then_case.same_as(op->then_case) && else_case.same_as(op->else_case)) return self;
    return make_if(cond, then_case, else_case, op->loc);
  }
  Expr mutate_Select(const Expr& self, const SelectNode* op) override {
    Expr cond = mutate(op->cond);
    Expr t = assuming(op->cond, [&] { return mutate(op->t); });
    Expr f = mutate(op->f);
    if (cond.same_as(op->cond) && t.same_as(op->t) && f.same_as(op->f)) return self;
    return make_select(cond, t, f, op->loc);
  }
  // A loop inside a nest's body (a T.serial or T.vectorized loop per element): its range
  // joins the facts, and within it the facts decide the guards, so that `j` of
  // `for j in T.vectorized(8)` needs no test against 0 and 8.
  Stmt mutate_For(const Stmt& self, const ForNode* op) override {
    if (!facts_) return IRMutator::mutate_For(self, op);
    size_t mark = facts_->mark();
    facts_->bind_loop(op->var, op->min, op->extent);
    bool saved = by_facts_;
    by_facts_ = true;
    Stmt out = IRMutator::mutate_For(self, op);
    by_facts_ = saved;
    facts_->restore(mark);
    return out;
  }
  Expr mutate_Binary(const Expr& self, const BinaryNode* op) override {
    if (op->op != BinaryOp::And || op->dtype.lanes != 1) return IRMutator::mutate_Binary(self, op);
    Expr a = mutate(op->a);
    Expr b = assuming(op->a, [&] { return mutate(op->b); });
    if (a.same_as(op->a) && b.same_as(op->b)) return self;
    return make_binary(BinaryOp::And, a, b, op->loc);
  }

  // by_facts: the loads inside these indices are masked as the facts require.
  std::vector<Expr> mask_indices(const std::vector<Expr>& idx, bool by_facts = false) {
    bool saved = by_facts_;
    by_facts_ = by_facts_ || by_facts;
    std::vector<Expr> out;
    for (const Expr& i : idx) out.push_back(mutate(i));
    by_facts_ = saved;
    return out;
  }

 private:
  static bool same(const std::vector<Expr>& a, const std::vector<Expr>& b) {
    for (size_t i = 0; i < a.size(); ++i) {
      if (!a[i].same_as(b[i])) return false;
    }
    return true;
  }
  Expr masked_address(const WideAccess& w) {
    return make_load(w.addr->buffer, mask_indices(w.addr->indices, true), w.addr->loc, w.addr->dtype.lanes);
  }
  // Both ends of an access of several elements inside the tensor.
  Expr wide_guard(const BufferLoadNode* a) {
    Expr first = guard(a->buffer, a->indices);
    std::vector<Expr> last = a->indices;
    Expr& along = last[vector_dim(*a->buffer)];
    along = an_.simplify(along + make_int(a->dtype.lanes - 1));
    Expr end = a->dtype.lanes > 1 ? guard(a->buffer, last) : Expr();
    if (!first) return end;
    return end ? (first && end) : first;
  }
  Expr guard(const Buffer& b, const std::vector<Expr>& idx) {
    Expr cond = in_bounds(an_, b, idx);
    if (cond && facts_ && by_facts_) cond = facts_->drop_implied(cond);
    return cond;
  }
  template <typename F>
  auto assuming(const Expr& cond, F f) -> decltype(f()) {
    if (!facts_) return f();
    size_t mark = facts_->mark();
    facts_->assume(cond);
    auto out = f();
    facts_->restore(mark);
    return out;
  }

  const Analyzer& an_;
  Facts* facts_;
  bool by_facts_;
  bool outside_nests_;
};

bool is_memory(const Buffer& b) { return b->scope == Scope::Global || b->scope == Scope::Shared; }

bool stores_to_memory(const Stmt& s) {
  bool found = false;
  post_order(s, [&](const Stmt& x) {
    if (auto* st = x.as<BufferStoreNode>()) found |= is_memory(st->buffer);
    if (x.as<EvaluateNode>()) found = true;
  });
  return found;
}

bool writes_registers(const Stmt& s) {
  bool found = false;
  post_order(s, [&](const Stmt& x) {
    if (auto* st = x.as<BufferStoreNode>()) found |= !is_memory(st->buffer);
  });
  return found;
}

// In a loop whose layout is replicated, every copy of an element runs the iteration.
// Register writes must happen in every copy (each thread reads its own register later),
// while a store to memory or an atomic must happen once: those alone are guarded. A
// shared store whose buffer the same loop reads back stays unguarded, so that every copy
// reads what it wrote (all copies store the same value).
class GuardMemoryEffects : public IRMutator {
 public:
  GuardMemoryEffects(Expr first, std::set<const BufferNode*> shared_read)
      : first_(std::move(first)), shared_read_(std::move(shared_read)) {}
  Stmt mutate_BufferStore(const Stmt& self, const BufferStoreNode* op) override {
    if (op->buffer->scope == Scope::Global || (op->buffer->scope == Scope::Shared && !shared_read_.count(op->buffer.get())) ||
        has_atomic(op->value)) {
      return make_if(first_, self, {}, op->loc);
    }
    return self;
  }
  Stmt mutate_Evaluate(const Stmt& self, const EvaluateNode* op) override { return make_if(first_, self, {}, op->loc); }

 private:
  // T.atomic_add(..., return_prev=True) stored into a thread's variable: the add happens once.
  static bool has_atomic(const Expr& e) {
    bool found = false;
    post_order(make_evaluate(e, {}), nullptr, [&](const Expr& x) {
      if (auto* c = x.as<CallNode>()) found |= c->op == "atomic_add";
    });
    return found;
  }

  Expr first_;
  std::set<const BufferNode*> shared_read_;
};

std::set<const BufferNode*> shared_loaded(const Stmt& s) {
  std::set<const BufferNode*> out;
  post_order(s, [](const Stmt&) {}, [&](const Expr& e) {
    if (auto* ld = e.as<BufferLoadNode>(); ld && ld->buffer->scope == Scope::Shared) out.insert(ld->buffer.get());
  });
  return out;
}

// A fragment accessed outside the nests is held whole by every thread (infer_layout),
// element `flat` in register `flat`: `f[k]` becomes `f_reg[k]`, an index known only at
// run time included (the register array then lives in local memory, as in TileLang).
class WholeFragmentToRegister : public IRMutator {
 public:
  explicit WholeFragmentToRegister(PassContext& ctx) : ctx_(ctx) {}
  Expr mutate_BufferLoad(const Expr& self, const BufferLoadNode* op) override {
    Expr e = IRMutator::mutate_BufferLoad(self, op);
    auto* ld = e.as<BufferLoadNode>();
    if (ld->buffer->scope != Scope::Fragment) return e;
    return make_load(reg(ld->buffer, op->loc), {row_major_index(ld->buffer, ld->indices)}, op->loc);
  }
  Stmt mutate_BufferStore(const Stmt& self, const BufferStoreNode* op) override {
    Stmt s = IRMutator::mutate_BufferStore(self, op);
    auto* st = s.as<BufferStoreNode>();
    if (st->buffer->scope != Scope::Fragment) return s;
    return make_store(reg(st->buffer, op->loc), {row_major_index(st->buffer, st->indices)}, st->value, op->loc);
  }

 private:
  Buffer reg(const Buffer& frag, const SourceLoc& loc) {
    auto l = ctx_.layouts.fragment.find(frag.get());
    user_assert(l != ctx_.layouts.fragment.end() && l->second->whole_in_every_thread(), loc)
        << "fragment '" << frag->name << "' is accessed outside a T.Parallel loop, so every thread must hold it whole, "
        << "but its layout is "
        << (l == ctx_.layouts.fragment.end() ? std::string("unknown") : l->second->describe());
    return ctx_.registers.at(frag.get());
  }
  PassContext& ctx_;
};

class Partitioner : public IRMutator {
 public:
  Partitioner(Kernel& k, PassContext& ctx) : k_(k), ctx_(ctx), an_(kernel_analyzer(k)), facts_(k, an_) {}

  // Copies that come before a pipelined loop in the same block (attention's Q tile) may
  // become cp.async too: pipeline_loops lets them fly with the loop's first stages. Only
  // copy loops standing directly in that block qualify: pipeline_loops completes a run of
  // them right after it, while a copy nested in another loop or a branch would be
  // completed only after the whole statement, behind the reads of it inside.
  Stmt mutate_Seq(const Stmt& self, const SeqNode* op) override {
    size_t loop = 0;  // no pipelined loop: nothing is ahead of one
    for (size_t i = 0; i < op->seq.size(); ++i) {
      auto* f = op->seq[i].as<ForNode>();
      if (f && f->for_kind == ForKind::Pipelined && f->num_stages >= 2) {
        loop = i;
        break;
      }
    }
    std::vector<Stmt> out;
    int saved = ahead_of_pipeline_;
    size_t assumed = facts_.mark();
    for (size_t i = 0; i < op->seq.size(); ++i) {
      auto* f = op->seq[i].as<ForNode>();
      ahead_of_pipeline_ = i < loop && f && f->for_kind == ForKind::Parallel;
      out.push_back(mutate(op->seq[i]));
      // T.assume(c): the programmer's axiom, a fact for the rest of the block (TileLang's meaning).
      auto* ev = op->seq[i].as<EvaluateNode>();
      if (auto* c = ev ? ev->value.as<CallNode>() : nullptr; c && c->op == "assume") facts_.assume(c->args.at(0));
    }
    facts_.restore(assumed);
    ahead_of_pipeline_ = saved;
    return make_seq(out, op->loc);
  }

  // Code outside the T.Parallel nests (what every thread runs alike) gets the same masks,
  // and what holds there (its conditions, loops and lets) becomes facts for what is inside.
  using IRMutator::mutate;
  Expr mutate(const Expr& e) override { return masked(WholeFragmentToRegister(ctx_).mutate(e)); }
  Stmt mutate_BufferStore(const Stmt& self, const BufferStoreNode*) override {
    return masked(WholeFragmentToRegister(ctx_).mutate(self));
  }
  Stmt mutate_Evaluate(const Stmt& self, const EvaluateNode*) override {
    return masked(WholeFragmentToRegister(ctx_).mutate(self));
  }
  Stmt mutate_IfThenElse(const Stmt& self, const IfThenElseNode* op) override {
    Expr cond = mutate(op->cond);
    size_t mark = facts_.mark();
    facts_.assume(op->cond);
    Stmt then_case = mutate(op->then_case);
    facts_.restore(mark);
    Stmt else_case = op->else_case ? mutate(op->else_case) : Stmt();
    if (cond.same_as(op->cond) && then_case.same_as(op->then_case) && else_case.same_as(op->else_case)) return self;
    return make_if(cond, then_case, else_case, op->loc);
  }
  Stmt mutate_LetStmt(const Stmt& self, const LetStmtNode* op) override {
    Expr value = mutate(op->value);
    facts_.bind(op->var, op->value);
    std::optional<ScopedThreads> scoped;  // a thread scope's nests divide among its threads
    if (auto r = thread_scope_range(op->value)) scoped.emplace(k_, op->var, r->count());
    Stmt body = mutate(op->body);
    if (value.same_as(op->value) && body.same_as(op->body)) return self;
    return make_let(op->var, value, body, op->loc);
  }

  Stmt mutate_For(const Stmt& self, const ForNode* op) override {
    if (op->for_kind != ForKind::Parallel) {
      bind_loop(op);
      bool pipelined = op->for_kind == ForKind::Pipelined && op->num_stages >= 2;
      pipelined_ += pipelined;
      size_t mark = facts_.mark();
      facts_.bind_loop(op->var, op->min, op->extent);
      Stmt out = IRMutator::mutate_For(self, op);
      facts_.restore(mark);
      pipelined_ -= pipelined;
      return out;
    }
    NestInfo n;
    n.facts = &facts_;
    n.async = (pipelined_ > 0 || ahead_of_pipeline_ > 0) && ctx_.target.sm >= 80;
    n.layout = ctx_.layouts.loop.at(op);
    const ForNode* f = op;
    while (true) {
      n.vars.push_back(f->var);
      auto* inner = f->body.as<ForNode>();
      if (!inner || inner->for_kind != ForKind::Parallel) break;
      f = inner;
    }
    n.body = f->body;
    n.loc = op->loc;
    return partition(n);
  }

 private:
  template <typename Node>
  Node masked(const Node& n) {
    return ctx_.options.disable_safe_memory ? n : MaskGlobal(an_, &facts_, true).mutate(n);
  }

  void bind_loop(const ForNode* op) {
    an_.bind_loop(op->var, op->min, op->extent);
  }

  Stmt one_slot(const NestInfo& n, int s) {
    Expr valid;
    n.layout->coords_expr(k_.thread_var, s, &valid);
    Stmt body = slot_body(n, s, k_, ctx_, an_, true);
    return valid ? make_if(an_.simplify(valid), body, {}, n.loc) : body;
  }

  Stmt partition(const NestInfo& n) {
    int slots = n.layout->slots();
    int vec = ctx_.options.disable_vectorize ? 1 : n.layout->vector_width();
    std::vector<Stmt> out;
    for (int g = 0; g < slots; g += vec) {
      if (vec > 1) {
        if (Stmt s = vectorize_group(n, g, vec, k_, ctx_, an_)) {
          out.push_back(s);
          continue;
        }
      }
      for (int s = g; s < g + vec && s < slots; ++s) out.push_back(one_slot(n, s));
    }
    Stmt body = make_seq(out, n.loc);
    int rep = n.layout->replicate_mask();
    if (rep && stores_to_memory(n.body)) {
      user_assert(n.layout->xor_groups_consistent(rep, true), n.loc)
          << "this T.Parallel loop runs with a replicated layout (" << n.layout->describe()
          << ") whose copies are not a power-of-two group of threads, so it cannot choose one copy to write memory";
      // Copies of a replicated loop would all write the same element; one suffices.
      Expr first = make_binary(BinaryOp::EQ, make_binary(BinaryOp::BitAnd, k_.thread_var, make_int(rep)), make_int(0));
      if (writes_registers(n.body)) {
        body = GuardMemoryEffects(first, shared_loaded(body)).mutate(body);
      } else {
        body = make_if(first, body, {}, n.loc);
      }
    }
    // One unit for insert_barriers: the statements of one loop never need a barrier
    // between them. final_simplify removes the always-true branch.
    return make_if(make_bool(true), body, {}, n.loc);
  }

  Kernel& k_;
  PassContext& ctx_;
  Analyzer an_;
  Facts facts_;
  int pipelined_ = 0;
  int ahead_of_pipeline_ = 0;
};

}  // namespace

Expr in_bounds(const Analyzer& an, const Buffer& b, const std::vector<Expr>& idx) {
  Expr cond;
  for (size_t d = 0; d < idx.size(); ++d) {
    Expr c = an.simplify(make_binary(BinaryOp::LT, idx[d], b->shape[d]));
    if (an.bound(idx[d]).lo < 0) c = c && an.simplify(make_binary(BinaryOp::GE, idx[d], make_int(0)));
    if (is_const_int(c, 1)) continue;
    cond = cond ? (cond && c) : c;
  }
  return cond;
}

// T.reducer_update(acc[i], v) (language/reducers.py): acc is each thread's local array of
// partials; the iteration adds v to its thread's partial, in one copy of the iteration
// only when the loop's layout gives it to several threads (the one whose replication bits
// are zero), so that every logical iteration contributes once.
class ReducerUpdates : public IRMutator {
 public:
  ReducerUpdates(const NestInfo& n, const Kernel& k) : n_(n), k_(k) {}
  Stmt mutate_Evaluate(const Stmt& self, const EvaluateNode* op) override {
    auto* c = op->value.as<CallNode>();
    if (!c || c->op != "reducer_update") return self;
    auto* target = c->args.at(0).as<BufferLoadNode>();
    internal_assert(target && target->buffer->scope == Scope::Local) << "reducer_update's target";
    static const BinaryOp kOps[] = {BinaryOp::Add, BinaryOp::Max, BinaryOp::Min,
                                    BinaryOp::BitAnd, BinaryOp::BitOr, BinaryOp::BitXor};
    int64_t code = *as_const_int(c->args.at(2));
    Expr sum = make_binary(kOps[code], c->args.at(0), c->args.at(1), op->loc);
    Stmt st = make_store(target->buffer, target->indices, sum, op->loc);
    int mask = n_.layout->replicate_mask();
    if (!mask) return st;
    user_assert(n_.layout->xor_groups_consistent(mask, true), op->loc)
        << "T.reducer_update: this T.Parallel loop (layout " << n_.layout->describe()
        << ") gives its iterations to groups of threads that are not one power-of-two group; the update "
           "could not be made once per iteration";
    Expr first = make_binary(BinaryOp::EQ, make_binary(BinaryOp::BitAnd, k_.thread_var, make_int(mask), op->loc),
                             make_int(0), op->loc);
    return make_if(first, st, {}, op->loc);
  }

 private:
  const NestInfo& n_;
  const Kernel& k_;
};

Stmt slot_body(const NestInfo& n, int s, Kernel& k, PassContext& ctx, const Analyzer& an, bool mask) {
  Expr valid;
  auto coords = n.layout->coords_expr(k.thread_var, s, &valid);
  std::vector<std::pair<Expr, Expr>> map;
  for (size_t d = 0; d < n.vars.size(); ++d) map.push_back({n.vars[d], an.simplify(coords[d])});
  Stmt body = FragmentToRegister(n, s, ctx, an).mutate(n.body);
  body = ReducerUpdates(n, k).mutate(body);
  body = substitute(body, map);
  if (mask && !ctx.options.disable_safe_memory) body = MaskGlobal(an, n.facts).mutate(body);
  return an.simplify(body);
}

Expr mask_loads(const Analyzer& an, Facts* facts, const Expr& value) { return MaskGlobal(an, facts).mutate(value); }

std::vector<Expr> mask_index_loads(const Analyzer& an, Facts* facts, const std::vector<Expr>& idx) {
  return MaskGlobal(an, facts).mask_indices(idx, true);
}

void partition_loops(Kernel& k, PassContext& ctx) {
  k.body = Partitioner(k, ctx).mutate(k.body);
  k.allocs.insert(k.allocs.end(), ctx.extra_locals.begin(), ctx.extra_locals.end());
  ctx.extra_locals.clear();
}

}  // namespace tegula::transform
