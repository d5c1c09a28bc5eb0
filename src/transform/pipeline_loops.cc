// Pass: pipeline_loops.
//
// Expects: lowered code in which the global->shared copies of a T.Pipelined(n,
// num_stages=S) loop are cp.async calls (vectorize.cc), each copy one unit. The copies
// may sit anywhere in the body (attention loads K, computes Q Kᵀ, then loads V): they read
// only global memory and the loop variable, so they can all be issued ahead.
// Guarantees: the loop overlaps loads with compute:
//   for s in 0..S-2:  copies(s) into stage s; commit              (prologue)
//   for k in 0..n-1:
//     wait until at most S-2 groups are in flight; barrier          (stage k % S has landed)
//     copies(k + S - 1) into stage (k + S - 1) % S; commit          (the stage compute(k-1) read)
//     compute(k) reading stage k % S, with its own barriers          (while those loads fly)
// (a compute that starts with a wgmma gemm issues it before the copies, and waits after;
// a compute that is only a wgmma gemm keeps one group running across iterations and
// loads S - 2 stages ahead (S >= 4): see the comment at split_async_issue's use)
//   wait for all; barrier
// Each staged buffer becomes S copies stacked along its first dimension. Loops of any
// other shape (one stage, or compute that writes a staged buffer, or a unit mixing copies
// with compute, such as a nested K loop) keep their order, each run of copies completed
// before the statement after it, at whatever depth the run stands.
// Within an iteration a gemm's wait moves down past the statements that do not need its
// result (sink_gemm_waits, gemm_waits.cc), so that work runs while the tensor cores do.
// Copies before a loop (partition_loops makes those ahead of a pipelined loop cp.async)
// are committed as a group after each run; the group is waited for at once unless the
// next unit touching shared memory is a staged loop, whose first wait then covers it:
// attention's Q tile loads while the first K and V tiles do.
// A loop whose copies plan_bulk_copies made tma_copy statements takes the warp-specialised
// form instead (pipeline_ws.cc). A hand schedule whose computations take several stages
// gets, in that form, a consumer that runs them shifted (pipeline_stages.cc); the other
// forms drop its marks and run the loop in the schedule's order.
#include <algorithm>
#include <map>
#include <set>

#include "ir/functor.h"
#include "ir/thread_guard.h"
#include "transform/gemm_waits.h"
#include "transform/passes.h"
#include "transform/pipeline_forms.h"

namespace tegula::transform {

namespace {

using namespace ir;

bool has_async_copy(const Stmt& s) {
  bool found = false;
  post_order(s, nullptr, [&](const Expr& e) {
    if (auto* c = e.as<CallNode>()) found |= c->op == "cp_async";
  });
  return found;
}

// A copy unit fills shared memory from global memory only: cp.async calls, or plain
// stores where the addresses were not aligned enough for cp.async. It reads nothing but
// global memory (a store from registers to shared memory is compute: it cannot move).
bool is_copy_unit(const Stmt& s) {
  bool writes_shared = false, reads_other = false;
  std::vector<const BufferNode*> async_dst;
  post_order(s, [&](const Stmt& x) {
    if (auto* st = x.as<BufferStoreNode>()) {
      writes_shared |= st->buffer->scope == Scope::Shared;
      reads_other |= st->buffer->scope != Scope::Shared;
    }
  }, [&](const Expr& e) {
    if (auto* c = e.as<CallNode>()) {
      if (c->op == "cp_async") {
        writes_shared = true;
        async_dst.push_back(c->args[0].as<BufferLoadNode>()->buffer.get());
      }
    }
  });
  post_order(s, nullptr, [&](const Expr& e) {
    auto* ld = e.as<BufferLoadNode>();
    if (!ld || ld->buffer->scope == Scope::Global) return;
    bool is_dst = false;
    for (auto* b : async_dst) is_dst |= b == ld->buffer.get();
    reads_other |= !is_dst;
  });
  return writes_shared && !reads_other;
}

bool contains_pipelined(const Stmt& s) {
  bool found = false;
  post_order(s, [&](const Stmt& x) {
    if (auto* f = x.as<ForNode>()) found |= f->for_kind == ForKind::Pipelined;
  }, nullptr);
  return found;
}

bool touches_shared(const Stmt& s) {
  bool found = false;
  post_order(s, [&](const Stmt& x) {
    if (auto* st = x.as<BufferStoreNode>()) found |= st->buffer->scope == Scope::Shared;
  }, [&](const Expr& e) {
    if (auto* ld = e.as<BufferLoadNode>()) found |= ld->buffer->scope == Scope::Shared;
  });
  return found;
}

// Completes each run of copy units nested inside a unit that also reads what they fill
// (a K loop of copies and a gemm inside the pipelined loop): commit and wait right after
// the run, at whatever depth it stands, so the reads after it see the tile. A staged loop
// nested inside is left as built: its own waits order its copies.
class CompleteNestedCopies : public IRMutator {
 public:
  explicit CompleteNestedCopies(const std::set<const StmtNode*>& staged) : staged_(staged) {}
  using IRMutator::mutate;
  Stmt mutate(const Stmt& s) override { return staged_.count(s.get()) ? s : IRMutator::mutate(s); }
  Stmt complete(const Stmt& s) {
    if (!has_async_copy(s) || !is_copy_unit(s)) return mutate(s);
    return make_seq({s, call("cp_async_commit"), call("cp_async_wait", {make_int(0)})});
  }
  Stmt mutate_Seq(const Stmt& self, const SeqNode* op) override {
    std::vector<Stmt> out;
    for (size_t i = 0; i < op->seq.size(); ++i) {
      const Stmt& s = op->seq[i];
      bool copy = has_async_copy(s) && is_copy_unit(s);
      out.push_back(copy ? s : mutate(s));
      bool next_copy = i + 1 < op->seq.size() && has_async_copy(op->seq[i + 1]) && is_copy_unit(op->seq[i + 1]);
      if (copy && !next_copy) {
        out.push_back(call("cp_async_commit"));
        out.push_back(call("cp_async_wait", {make_int(0)}));
      }
    }
    return make_seq(out, op->loc);
  }
  Stmt mutate_For(const Stmt& self, const ForNode* op) override {
    return make_for(op->var, op->min, op->extent, op->for_kind, complete(op->body), op->num_stages, op->loc);
  }
  Stmt mutate_IfThenElse(const Stmt& self, const IfThenElseNode* op) override {
    return make_if(op->cond, complete(op->then_case), op->else_case ? complete(op->else_case) : Stmt(), op->loc);
  }
  Stmt mutate_LetStmt(const Stmt& self, const LetStmtNode* op) override {
    return make_let(op->var, op->value, complete(op->body), op->loc);
  }

 private:
  const std::set<const StmtNode*>& staged_;
};

class Pipeliner : public IRMutator {
 public:
  Pipeliner(Kernel& k, PassContext& ctx) : k_(k), ctx_(ctx) {}

  Stmt mutate_For(const Stmt& self, const ForNode* op) override {
    bool pipelined = op->for_kind == ForKind::Pipelined;
    if (pipelined) loop_ = self;
    in_pipelined_ += pipelined;
    Stmt inner = IRMutator::mutate_For(self, op);
    in_pipelined_ -= pipelined;
    op = inner.as<ForNode>();
    std::vector<StageMark> marks;
    if (op->for_kind == ForKind::Pipelined) {
      // Only the warp-specialised form shifts computations by stage; elsewhere the loop
      // runs one iteration at a time in the order the schedule emitted, which means the same.
      Stmt body = take_stage_marks(op->body, &marks);
      if (!marks.empty()) {
        inner = make_for(op->var, op->min, op->extent, op->for_kind, body, op->num_stages, op->loc);
        op = inner.as<ForNode>();
      }
    }
    if (op->for_kind == ForKind::Pipelined && ctx_.warp_specialize) {
      bool tma = false;
      for (auto& u : op->body.as<SeqNode>() ? op->body.as<SeqNode>()->seq : std::vector<Stmt>{op->body}) tma |= is_tma_copy(u);
      if (tma) {
        Stmt unit = warp_specialized_loop(op, marks, k_, ctx_);
        staged_loops_.insert(unit.get());
        ws_loops_.insert(unit.get());
        return unit;
      }
    }
    if (op->for_kind != ForKind::Pipelined || !has_async_copy(op->body)) return inner;
    auto* seq = op->body.as<SeqNode>();
    std::vector<Stmt> units = seq ? seq->seq : std::vector<Stmt>{op->body};
    std::vector<Stmt> copy_units, compute_units;
    // The shared buffers the copies fill, and the position of the last copy into each.
    std::vector<Buffer> filled;
    std::map<const BufferNode*, size_t> last_fill;
    std::vector<bool> is_copy(units.size());
    for (size_t i = 0; i < units.size(); ++i) {
      is_copy[i] = is_copy_unit(units[i]);
      if (!is_copy[i]) {
        compute_units.push_back(units[i]);
        continue;
      }
      copy_units.push_back(units[i]);
      post_order(units[i], [&](const Stmt& x) {
        auto* st = x.as<BufferStoreNode>();
        if (st && st->buffer->scope == Scope::Shared) filled.push_back(st->buffer), last_fill[st->buffer.get()] = i;
      }, [&](const Expr& e) {
        auto* c = e.as<CallNode>();
        if (c && c->op == "cp_async") {
          filled.push_back(c->args[0].as<BufferLoadNode>()->buffer);
          last_fill[filled.back().get()] = i;
        }
      });
    }
    bool shaped = !copy_units.empty() && !compute_units.empty() && op->num_stages >= 2;
    // A buffer staged S deep is a new allocation, which only the loop's own accesses are
    // moved to: one also touched outside the loop (an epilogue clearing it) is not staged.
    for (const Buffer& b : filled) shaped &= accesses(k_.body, b.get()) == accesses(loop_, b.get());
    // Compute may rewrite a staged buffer (zero a tail, say) only after its copy: the
    // copy moves ahead, the rewrite stays in place on the same stage.
    for (size_t i = 0; i < units.size(); ++i) {
      if (is_copy[i]) continue;
      shaped &= !has_async_copy(units[i]);
      post_order(units[i], [&](const Stmt& x) {
        auto* st = x.as<BufferStoreNode>();
        if (!st) return;
        auto it = last_fill.find(st->buffer.get());
        shaped &= it == last_fill.end() || it->second < i;
      }, nullptr);
    }
    if (!shaped) {
      // Keep the order; complete each run of copies before the unit that follows it.
      std::vector<Stmt> body;
      for (size_t i = 0; i < units.size(); ++i) {
        // A unit that mixes copies with reads of them completes its copies inside (and,
        // for any copy no smaller statement holds alone, after it).
        bool mixed = has_async_copy(units[i]) && !is_copy[i];
        body.push_back(mixed ? CompleteNestedCopies(staged_loops_).mutate(units[i]) : units[i]);
        bool next_async = i + 1 < units.size() && has_async_copy(units[i + 1]) && is_copy[i + 1];
        if (has_async_copy(units[i]) && !next_async) {
          body.push_back(call("cp_async_commit"));
          body.push_back(call("cp_async_wait", {make_int(0)}));
        }
      }
      return make_for(op->var, op->min, op->extent, ForKind::Serial, make_seq(body), 0, op->loc);
    }
    const size_t ncopy = copy_units.size();
    units = copy_units;
    units.insert(units.end(), compute_units.begin(), compute_units.end());
    int S = op->num_stages;
    // The shared buffers the copies fill, each stacked S deep.
    auto staged = stack_buffers(k_, ctx_, filled, S);
    Expr k = op->var, n = op->extent;
    auto copies = [&](Expr iter, Expr stage) {
      std::vector<Stmt> out;
      for (size_t i = 0; i < ncopy; ++i) {
        out.push_back(Restage(staged, stage).mutate(substitute(units[i], {{k, op->min + iter}})));
      }
      return make_seq(out);
    };
    Expr it = k - op->min;
    // The compute of one iteration touches one stage; barriers between its own units
    // (a rewrite of a staged tile before a gemm reads it) are placed here, since the loop
    // leaves this pass as one unit.
    std::vector<Stmt> compute;
    for (size_t i = ncopy; i < units.size(); ++i) {
      compute.push_back(Restage(staged, floormod(it, make_int(S))).mutate(units[i]));
    }
    // When the compute starts with an asynchronous gemm (wgmma), it is issued first and
    // the next stage's copies are issued while the tensor cores run: they fill another
    // stage, so only the gemm's wait has to follow them. When the gemm is all the compute
    // (a GEMM main loop: nothing reads its accumulator inside the loop), its wait lets
    // the latest group run on (wgmma_wait with 1 pending), so the tensor cores always have
    // the next group queued; the copies then fill the stage read two iterations back, the
    // one every thread's wait has released before this iteration's barrier.
    Stmt issue, rest, wait;
    bool async = split_async_issue(compute[0], &issue, &rest);
    bool deferred = async && compute.size() == 1 && S >= 4 && only_wait(rest, &wait);
    if (!deferred) {
      Stmt grouped = by_consumer(op, units, ncopy, compute, staged, S);
      if (grouped) return grouped;
    }
    const int dist = deferred ? S - 2 : S - 1;  // stages loaded ahead of the one computed
    std::vector<Stmt> prologue;
    for (int s = 0; s < dist; ++s) {
      prologue.push_back(make_if(make_binary(BinaryOp::LT, make_int(s), n), copies(make_int(s), make_int(s))));
      prologue.push_back(call("cp_async_commit"));
    }
    Expr ahead = it + int64_t(dist);
    std::vector<Stmt> body = {call("cp_async_wait", {make_int(dist - 1)}), make_sync()};
    if (async) {
      body.push_back(issue);
      compute[0] = rest;
      if (!deferred) sink_gemm_waits(compute, k_.thread_var, nullptr, is_call_stmt(issue, "wgmma_ss"));
    } else {
      sink_gemm_waits(compute, k_.thread_var);
    }
    if (deferred) body.push_back(with_pending(wait, 1));
    body.push_back(make_if(make_binary(BinaryOp::LT, ahead, n), copies(ahead, floormod(ahead, make_int(S)))));
    body.push_back(call("cp_async_commit"));
    if (!deferred) body.push_back(place_barriers(compute, k_));
    Stmt loop = make_for(op->var, op->min, op->extent, ForKind::Serial, make_seq(body), 0, op->loc);
    std::vector<Stmt> all = prologue;
    all.push_back(loop);
    if (deferred) all.push_back(wait);
    all.push_back(call("cp_async_wait", {make_int(0)}));
    all.push_back(make_sync());
    // One unit: insert_barriers places barriers around it, never inside.
    Stmt unit = make_if(make_bool(true), make_seq(all), {}, op->loc);
    staged_loops_.insert(unit.get());
    return unit;
  }

  // The schedule by consumer, for a loop whose copies fill buffers that different compute
  // statements read in turn (attention: Q Kᵀ reads K, then P V reads V), each group's
  // readers ending before the next group's begin. Copies are grouped by the statement
  // that first reads what they fill; tile t of a group lives in stage t % S, all S stages
  // loaded ahead:
  //   for s in 0..S-1: per group g: copies_g(s) into stage s; commit
  //   for k in 0..n-1: per group g, in order:
  //     wait until S * G - 1 groups are in flight; barrier           (g's tile k landed)
  //     the compute statements reading it
  //     (barrier) copies_g(k + S) into stage k % S; commit            (the stage just read)
  // so each tile is waited for only where it is first read (V loads on through Q Kᵀ and
  // the softmax) and reloaded as soon as it is last read: S tiles of each group in flight
  // where the order-of-issue schedule below keeps S - 1. Groups commit in the order they
  // are waited for, one group each time, which makes S * G - 1 the count after g's tile.
  // A null Stmt when the loop does not have that shape.
  Stmt by_consumer(const ForNode* op, const std::vector<Stmt>& units, size_t ncopy, const std::vector<Stmt>& compute,
                   const std::map<const BufferNode*, std::pair<Buffer, int64_t>>& staged, int S) {
    // Each copy unit's group: the first compute statement reading a buffer it fills.
    std::vector<size_t> first(ncopy, compute.size()), last(ncopy, 0);
    for (size_t i = 0; i < ncopy; ++i) {
      std::set<const BufferNode*> fills;
      post_order(units[i], [&](const Stmt& x) {
        auto* st = x.as<BufferStoreNode>();
        if (st && st->buffer->scope == Scope::Shared) fills.insert(st->buffer.get());
      }, [&](const Expr& e) {
        auto* c = e.as<CallNode>();
        if (c && c->op == "cp_async") fills.insert(c->args[0].as<BufferLoadNode>()->buffer.get());
      });
      for (size_t j = 0; j < compute.size(); ++j) {
        bool reads = false;
        for (auto* b : fills) {
          auto it = staged.find(b);
          reads |= reads_buffer(compute[j], it == staged.end() ? b : it->second.first.get());
        }
        if (!reads) continue;
        first[i] = std::min(first[i], j);
        last[i] = std::max(last[i], j);
      }
      if (first[i] == compute.size()) return Stmt();  // a tile nothing reads: keep the plain schedule
    }
    std::map<size_t, std::vector<size_t>> groups;  // first reader -> copy units
    std::map<size_t, size_t> release;              // first reader -> last reader of the group
    for (size_t i = 0; i < ncopy; ++i) {
      groups[first[i]].push_back(i);
      release[first[i]] = std::max(release[first[i]], last[i]);
    }
    if (groups.size() < 2) return Stmt();
    size_t prev_last = 0;
    bool started = false;
    for (auto& [f, l] : release) {
      if (started && f <= prev_last) return Stmt();  // readers of two groups interleave
      prev_last = l;
      started = true;
    }
    const int64_t G = int64_t(groups.size());
    Expr k = op->var, n = op->extent, it = k - op->min;
    auto copies = [&](const std::vector<size_t>& members, Expr iter, Expr stage) {
      std::vector<Stmt> out;
      for (size_t i : members) out.push_back(Restage(staged, stage).mutate(substitute(units[i], {{k, op->min + iter}})));
      return make_seq(out);
    };
    std::vector<Stmt> prologue;
    for (int s = 0; s < S; ++s) {
      for (auto& [f, members] : groups) {
        prologue.push_back(make_if(make_binary(BinaryOp::LT, make_int(s), n), copies(members, make_int(s), make_int(s))));
        prologue.push_back(call("cp_async_commit"));
      }
    }
    std::vector<Stmt> body;
    Expr ahead = it + int64_t(S);
    for (size_t j = 0; j < compute.size(); ++j) {
      if (groups.count(j)) {
        body.push_back(call("cp_async_wait", {make_int(S * G - 1)}));
        body.push_back(make_sync());
      }
      body.push_back(compute[j]);
      for (auto& [f, members] : groups) {
        if (release[f] != j) continue;
        // place_barriers puts a barrier between the reads just made and these writes.
        body.push_back(make_if(make_binary(BinaryOp::LT, ahead, n), copies(members, ahead, floormod(it, make_int(S)))));
        body.push_back(call("cp_async_commit"));
      }
    }
    Stmt loop = make_for(op->var, op->min, op->extent, ForKind::Serial, place_barriers(body, k_), 0, op->loc);
    std::vector<Stmt> all = prologue;
    all.push_back(loop);
    all.push_back(call("cp_async_wait", {make_int(0)}));
    all.push_back(make_sync());
    Stmt unit = make_if(make_bool(true), make_seq(all), {}, op->loc);
    staged_loops_.insert(unit.get());
    return unit;
  }

  // Outside pipelined loops, cp.async copies (those partition_loops issued ahead of a
  // pipelined loop) are committed as one group after each run of them. The group is
  // waited for at once, unless the next unit that touches shared memory is a cp.async
  // staged loop: then the loop's first wait covers it, since groups complete in order, and
  // the copy flies with the loop's first stages. A warp-specialised loop waits on its
  // mbarriers only, never on cp.async groups, so the copies before it are waited for here.
  Stmt mutate_Seq(const Stmt& self, const SeqNode* op) override {
    if (in_pipelined_) return IRMutator::mutate_Seq(self, op);  // the loop's own handling follows
    // A unit without a pipelined loop inside is left whole; one with a loop inside is
    // handled at its own level first.
    std::vector<Stmt> in;
    std::vector<bool> loose;
    for (const Stmt& s : op->seq) {
      bool has_loop = contains_pipelined(s);
      in.push_back(has_loop ? mutate(s) : s);
      loose.push_back(!has_loop && has_async_copy(s));
    }
    std::vector<Stmt> out;
    for (size_t i = 0; i < in.size(); ++i) {
      out.push_back(in[i]);
      if (!loose[i] || (i + 1 < in.size() && loose[i + 1])) continue;
      out.push_back(call("cp_async_commit"));
      bool overlap = false;
      for (size_t j = i + 1; j < in.size(); ++j) {
        if (staged_loops_.count(in[j].get())) {
          overlap = !ws_loops_.count(in[j].get());
          break;
        }
        if (touches_shared(in[j]) || contains_pipelined(op->seq[j])) break;
      }
      if (!overlap) out.push_back(call("cp_async_wait", {make_int(0)}));
    }
    return make_seq(out, op->loc);
  }

 private:
  Kernel& k_;
  PassContext& ctx_;
  std::set<const StmtNode*> staged_loops_;  // the staged loops this pass built
  std::set<const StmtNode*> ws_loops_;      // those of them that are warp-specialised
  int in_pipelined_ = 0;
  Stmt loop_;  // the pipelined loop being rewritten, as the kernel body holds it

  static int64_t accesses(const Stmt& s, const BufferNode* b) {
    int64_t n = 0;
    post_order(s, [&](const Stmt& x) {
      if (auto* st = x.as<BufferStoreNode>()) n += st->buffer.get() == b;
    }, [&](const Expr& e) {
      if (auto* ld = e.as<BufferLoadNode>()) n += ld->buffer.get() == b;
    });
    return n;
  }
};

}  // namespace

void pipeline_loops(Kernel& k, PassContext& ctx) { k.body = Pipeliner(k, ctx).mutate(k.body); }

StagedBuffers stack_buffers(Kernel& k, PassContext& ctx, const std::vector<Buffer>& filled, int S) {
  StagedBuffers staged;
  for (const Buffer& b : filled) {
    if (staged.count(b.get())) continue;
    int64_t rows = *as_const_int(b->shape[0]);
    std::vector<Expr> shape = b->shape;
    shape[0] = make_int(rows * S);
    staged[b.get()] = {make_buffer(b->name, Scope::Shared, b->dtype, shape, b->loc), rows};
  }
  for (auto& b : k.allocs) {
    auto it = staged.find(b.get());
    if (it == staged.end()) continue;
    if (ctx.swizzled.erase(b.get())) ctx.swizzled.insert(it->second.first.get());
    if (ctx.panelled.erase(b.get())) ctx.panelled.insert(it->second.first.get());
    b = it->second.first;
  }
  return staged;
}

bool reads_buffer(const Stmt& s, const BufferNode* b) {
  bool found = false;
  post_order(s, nullptr, [&](const Expr& e) {
    if (auto* ld = e.as<BufferLoadNode>()) found |= ld->buffer.get() == b;
  });
  return found;
}

}  // namespace tegula::transform
