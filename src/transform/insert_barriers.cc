// Pass: insert_barriers.
//
// Expects: lowered code (no tile ops, no parallel loops); shared memory is written and
// read by different threads. Guarantees: between a write of a shared buffer and any later
// access of it by another thread, and between a read and a later write, a block-wide
// barrier runs — also across iterations of an enclosing loop.
//
// Conservative and simple: every shared access counts as touching the whole buffer.
// A statement that conflicts with what happened since the last barrier gets one before it.
// Branches are units: a barrier never goes inside one (its threads may diverge), and
// each partitioned T.Parallel loop arrives wrapped in an always-true branch, since its
// own statements touch disjoint elements.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "ir/functor.h"
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
  Stmt mutate_Seq(const Stmt& self, const SeqNode* op) override { return run(op->seq, op->loc); }
  // A branch is a unit, except the split of a warp-specialised kernel (warp_specialize):
  // its consumer side is the program, placed like any other.
  Stmt mutate_IfThenElse(const Stmt& self, const IfThenElseNode* op) override {
    auto* c = op->cond.as<CallNode>();
    if (!c || c->op != "ws_producer" || !op->else_case) return self;
    auto* seq = op->else_case.as<SeqNode>();
    return make_if(op->cond, op->then_case, run(seq ? seq->seq : std::vector<Stmt>{op->else_case}, op->loc), op->loc);
  }
  Stmt mutate_For(const Stmt& self, const ForNode* op) override {
    Stmt body = mutate(op->body);
    // The next iteration's accesses follow this one's: check the body against itself.
    if (!touched(body).writes.empty()) body = make_seq({body, make_sync(op->loc)});
    return make_for(op->var, op->min, op->extent, op->for_kind, body, op->num_stages, op->loc);
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
};

}  // namespace

Stmt place_barriers_in_loop(const Stmt& loop) { return Barriers().mutate(loop); }

Stmt place_barriers(const std::vector<Stmt>& seq) { return Barriers().run(seq, seq.empty() ? SourceLoc() : seq[0]->loc); }

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
    k.body = Barriers().run(seq ? seq->seq : std::vector<Stmt>{k.body}, k.body->loc);
  } catch (...) {
    g_same_bytes = nullptr;
    throw;
  }
  g_same_bytes = nullptr;
}

}  // namespace tegula::transform
