// Pass: insert_barriers.
//
// Expects: lowered code (no tile ops, no parallel loops); shared memory is written and
// read by different threads. Guarantees: between a write of a shared buffer and any later
// access of it by another thread, and between a read and a later write, a block-wide
// barrier runs — also across iterations of an enclosing loop.
//
// Conservative and simple: every shared access counts as touching the whole buffer.
// A statement that conflicts with what happened since the last barrier gets one before it.
// Branches whose threads may diverge are units: a barrier never goes inside one, and one
// whose threads read what others wrote inside it (it would need a barrier there) is an
// error at its line. Each partitioned T.Parallel loop arrives wrapped in an always-true
// branch, a unit too, since its own statements touch disjoint elements. A branch every
// thread of the block takes alike gets barriers inside: its condition is uniform, reading
// block indices, arguments and registers every thread holds alike (a mask copied into a
// fragment held whole; ir/thread_guard.h learns which); so does a thread scope's body
// (scope_thread_guards.cc), whose barriers then meet the scope's threads alone: a named
// barrier each range of threads has to itself. A loop left by a break or continue ends
// each iteration and itself with a barrier the jump cannot skip.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "ir/functor.h"
#include "ir/printer.h"
#include "ir/thread_guard.h"
#include "ir/wide_access.h"
#include "transform/passes.h"

namespace tegula::transform {

namespace {

using namespace ir;
using BufSet = std::set<const BufferNode*>;

struct Touch {
  BufSet reads, writes;
  bool has_sync = false;
};

// Shared buffers that share bytes (plan_storage's reuse), each mapped to one of them: a
// conflict on the bytes is a conflict between the buffers. Set while insert_barriers runs.
thread_local const std::map<const BufferNode*, const BufferNode*>* g_same_bytes = nullptr;

Touch touched_raw(const Stmt& s);

Touch touched(const Stmt& s) {
  Touch t = touched_raw(s);
  if (!g_same_bytes) return t;
  auto canon = [](BufSet& set) {
    BufSet out;
    for (auto* b : set) {
      auto it = g_same_bytes->find(b);
      out.insert(it == g_same_bytes->end() ? b : it->second);
    }
    set = std::move(out);
  };
  canon(t.reads);
  canon(t.writes);
  return t;
}

Touch touched_raw(const Stmt& s) {
  Touch t;
  post_order(s, [&](const Stmt& x) {
    if (auto* st = x.as<BufferStoreNode>()) {
      if (st->buffer->scope == Scope::Shared) t.writes.insert(st->buffer.get());
    }
    if (x.as<SyncNode>()) t.has_sync = true;
  }, [&](const Expr& e) {
    if (auto* ld = e.as<BufferLoadNode>()) {
      if (ld->buffer->scope == Scope::Shared) t.reads.insert(ld->buffer.get());
    }
    if (auto* c = e.as<CallNode>()) {
      // cp.async writes its destination (its first argument, an element of the buffer).
      if (c->op == "cp_async" || c->op == "tma_copy") t.writes.insert(c->args[0].as<BufferLoadNode>()->buffer.get());
      // So does an atomic add into shared memory (its address is its first argument).
      // An explicit-width store writes its address's elements.
      auto w = wide_access(c);
      if (w && w->store && w->addr->buffer->scope == Scope::Shared) t.writes.insert(w->addr->buffer.get());
      if (c->op == "atomic_add") {
        auto* addr = c->args[0].as<BufferLoadNode>();
        if (addr && addr->buffer->scope == Scope::Shared) t.writes.insert(addr->buffer.get());
      }
    }
  });
  return t;
}

bool meets(const BufSet& a, const BufSet& b) {
  for (auto* x : a) {
    if (b.count(x)) return true;
  }
  return false;
}

class Barriers : public IRMutator {
 public:
  // Learns from the kernel's lowered body which registers hold the same value in every
  // thread, so that a branch on one (a mask read from a replicated fragment) is uniform.
  explicit Barriers(const Kernel& k) : uni_(k.thread_var) { uni_.learn_lowered(k.body); }
  Stmt mutate_Seq(const Stmt& self, const SeqNode* op) override { return run(op->seq, op->loc); }
  // The split of a warp-specialised kernel (warp_specialize): its consumer side is the
  // program, placed like any other. Other branches: see the header.
  Stmt mutate_IfThenElse(const Stmt& self, const IfThenElseNode* op) override {
    auto* c = op->cond.as<CallNode>();
    if (c && c->op == "ws_producer" && op->else_case) {
      return make_if(op->cond, op->then_case, in_branch(op->else_case), op->loc);
    }
    bool open = !is_const_int(op->cond, 1) && uni_.uniform(op->cond);
    auto side = [&](const Stmt& s) { return s && (open || is_scope(s)) ? in_branch(s) : s; };
    if (!open && !is_const_int(op->cond, 1)) {
      check_closed(op->then_case, op);
      check_closed(op->else_case, op);
    }
    Stmt then_case = side(op->then_case), else_case = side(op->else_case);
    if (then_case.same_as(op->then_case) && else_case.same_as(op->else_case)) return self;
    return make_if(op->cond, then_case, else_case, op->loc);
  }
  Stmt mutate_LetStmt(const Stmt& self, const LetStmtNode* op) override {
    if (is_scope(self)) uni_.mark_varying(op->var);
    else uni_.bind(op->var, op->value);
    return IRMutator::mutate_LetStmt(self, op);
  }
  Stmt mutate_For(const Stmt& self, const ForNode* op) override {
    uni_.bind(op->var, op->min);
    uni_.bind(op->var, op->extent);
    Stmt body = mutate(op->body);
    // The next iteration's accesses follow this one's: check the body against itself.
    if (touched(body).writes.empty()) {
      return make_for(op->var, op->min, op->extent, op->for_kind, body, op->num_stages, op->loc);
    }
    if (!jumps_out(body)) {
      body = make_seq({body, make_sync(op->loc)});
      return make_for(op->var, op->min, op->extent, op->for_kind, body, op->num_stages, op->loc);
    }
    // A break or continue (every thread takes it alike: check_loop_jumps) may skip the
    // body's last barrier: the next iteration starts with one, and so does what follows.
    body = make_seq({make_sync(op->loc), body, make_sync(op->loc)});
    return make_seq({make_for(op->var, op->min, op->extent, op->for_kind, body, op->num_stages, op->loc),
                     make_sync(op->loc)},
                    op->loc);
  }

  // Whether s holds a break or continue of the loop whose body it is (not of a loop inside).
  static bool jumps_out(const Stmt& s) {
    struct Finder : IRVisitor {
      bool found = false;
      void visit_LoopJump(const LoopJumpNode*) override { found = true; }
      void visit_For(const ForNode*) override {}
    } f;
    f.visit(s);
    return f.found;
  }
  // As a loop: the next iteration (and the condition that starts it) follows this one.
  Stmt mutate_While(const Stmt& self, const WhileNode* op) {
    Stmt body = mutate(op->body);
    Touch t = touched(body);
    if (!t.writes.empty()) body = make_seq({body, make_sync(op->loc)});
    return make_while(op->cond, body, op->loc);
  }

 static bool is_scope(const Stmt& s) {
    auto* let = s.as<LetStmtNode>();
    return let && thread_scope_range(let->value);
  }
  // A branch the threads may take differently is a unit: no barrier can go inside it. Code
  // that needs one there (threads reading what others wrote in it) is refused at the branch.
  void check_closed(const Stmt& side, const IfThenElseNode* op) {
    if (!side || is_scope(side)) return;
    auto* seq = side.as<SeqNode>();
    std::vector<Stmt> stmts = seq ? seq->seq : std::vector<Stmt>{side};
    BufSet reads, writes, shared_reads, shared_writes;  // shared_*: by statements of several threads
    for (const Stmt& s : stmts) {
      Touch t = touched(s);
      if (s.as<SyncNode>() || t.has_sync) {
        reads.clear(), writes.clear(), shared_reads.clear(), shared_writes.clear();
        continue;
      }
      bool several = by_several_threads(s);
      const BufferNode* hit = nullptr;
      auto first_met = [&](const BufSet& a, const BufSet& b) {
        for (auto* x : a) {
          if (!hit && b.count(x)) hit = x;
        }
      };
      if (several) first_met(t.reads, writes), first_met(t.writes, writes), first_met(t.writes, reads);
      first_met(t.reads, shared_writes), first_met(t.writes, shared_writes), first_met(t.writes, shared_reads);
      user_assert(!hit, op->loc)
          << "tile code under a condition the engine cannot prove the same in every thread of the block ("
          << to_string(op->cond) << ") needs a barrier inside the branch ('" << hit->name
          << "' is written and read there by different threads), and a barrier under a branch some threads "
          << "skip would hang: compute the condition from block indices, kernel arguments, or values every "
          << "thread holds alike";
      reads.insert(t.reads.begin(), t.reads.end());
      writes.insert(t.writes.begin(), t.writes.end());
      if (several) {
        shared_reads.insert(t.reads.begin(), t.reads.end());
        shared_writes.insert(t.writes.begin(), t.writes.end());
      }
    }
  }
  // Whether s's shared-memory accesses are divided among threads: a partitioned T.Parallel
  // nest (an always-true unit) or a call the threads run together on a shared tile (a gemm,
  // a matrix load or store, a bulk copy). A thread's own accesses (a load, a store, an
  // atomic at an index it computed) are not: SIMT code under a branch on the thread index
  // orders them itself, with its own barriers.
  static bool by_several_threads(const Stmt& s) {
    static const char* const kCollective[] = {"gemm_", "wgmma_", "ldmatrix", "stmatrix", "tma_"};
    bool found = false;
    post_order(s, [&](const Stmt& x) {
      auto* br = x.as<IfThenElseNode>();
      if (br && is_const_int(br->cond, 1)) found = true;
    }, [&](const Expr& e) {
      auto* c = e.as<CallNode>();
      if (!c || found) return;
      for (const char* prefix : kCollective) found |= c->op.rfind(prefix, 0) == 0;
    });
    return found;
  }
  Stmt in_branch(const Stmt& s) {
    auto* seq = s.as<SeqNode>();
    return seq ? run(seq->seq, s->loc) : run({s}, s->loc);
  }

  Stmt run(const std::vector<Stmt>& seq, const SourceLoc& loc) {
    std::vector<Stmt> out;
    BufSet reads, writes;
    for (const Stmt& s0 : seq) {
      Stmt s = mutate(s0);
      if (s.as<SyncNode>()) {
        reads.clear(), writes.clear();
        out.push_back(s);
        continue;
      }
      Touch t = touched(s);
      if (meets(t.reads, writes) || meets(t.writes, writes) || meets(t.writes, reads)) {
        out.push_back(make_sync(s->loc));
        reads.clear(), writes.clear();
      }
      if (t.has_sync) reads.clear(), writes.clear();
      reads.insert(t.reads.begin(), t.reads.end());
      writes.insert(t.writes.begin(), t.writes.end());
      out.push_back(s);
    }
    return make_seq(out, loc);
  }

 private:
  Uniformity uni_;
};

// Every barrier inside a thread scope meets the scope's threads alone: a named barrier per
// range of threads (1 is the warp-specialised consumers'), so that scopes running side by
// side (a branch and its else) never meet at the same one.
class ScopeBarriers : public IRMutator {
 public:
  Stmt mutate_LetStmt(const Stmt& self, const LetStmtNode* op) override {
    auto r = thread_scope_range(op->value);
    if (!r) return IRMutator::mutate_LetStmt(self, op);
    auto saved = scope_;
    auto it = ids_.find({r->lo, r->hi});
    int id = it != ids_.end() ? it->second : int(ids_.size()) + 2;
    user_assert(id <= 15, op->loc) << "more than 14 different ranges of threads run tile code under thread guards; "
                                   << "the hardware has 15 named barriers";
    ids_[{r->lo, r->hi}] = id;
    scope_ = {id, int(r->count())};
    Stmt out = IRMutator::mutate_LetStmt(self, op);
    scope_ = saved;
    return out;
  }
  Stmt mutate_Sync(const Stmt& self, const SyncNode* op) override {
    if (!scope_.second || op->threads) return self;
    return make_scoped_sync(scope_.first, scope_.second, op->loc);
  }

 private:
  std::pair<int, int> scope_{0, 0};  // (barrier, threads) of the innermost scope
  std::map<std::pair<int64_t, int64_t>, int> ids_;
};

}  // namespace

// pipeline_loops' regions: their barriers stay block-wide until insert_barriers scopes them.
Stmt place_barriers_in_loop(const Stmt& loop, const Kernel& k) { return Barriers(k).mutate(loop); }

Stmt place_barriers(const std::vector<Stmt>& seq, const Kernel& k) {
  return Barriers(k).run(seq, seq.empty() ? SourceLoc() : seq[0]->loc);
}

void insert_barriers(Kernel& k, PassContext&) {
  // Union of buffers whose byte ranges overlap, by a sweep over the sorted ranges.
  std::vector<std::tuple<int64_t, int64_t, const BufferNode*>> ranges;
  for (auto& [b, off] : k.smem_offset) ranges.push_back({off, off + b->num_elements_const() * b->dtype.bytes(), b});
  std::sort(ranges.begin(), ranges.end(), [](auto& a, auto& b) { return std::get<0>(a) < std::get<0>(b); });
  std::map<const BufferNode*, const BufferNode*> same;
  const BufferNode* group = nullptr;
  int64_t group_end = -1;
  for (auto& [lo, hi, b] : ranges) {
    if (lo >= group_end) group = b;
    same[b] = group;
    group_end = std::max(group_end, hi);
  }
  g_same_bytes = &same;
  auto* seq = k.body.as<SeqNode>();
  try {
    k.body = Barriers(k).run(seq ? seq->seq : std::vector<Stmt>{k.body}, k.body->loc);
    k.body = ScopeBarriers().mutate(k.body);
  } catch (...) {
    g_same_bytes = nullptr;
    throw;
  }
  g_same_bytes = nullptr;
}

}  // namespace tegula::transform
