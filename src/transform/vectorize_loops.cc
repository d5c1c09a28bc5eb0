// Pass: vectorize_loops.
//
// Expects: per-thread code (partition_loops and lower_tile_ops done); a T.vectorized loop is
// a For of kind Vectorized, its accesses masked where partitioning found them able to run
// past a tensor's edge.
// Guarantees: no Vectorized loop is left. One of constant extent E whose body is a single
// store into global or shared memory (T.assume hints beside it allowed), with no masked
// access, where every memory access moves with the loop one element a step in memory
// (contiguous: A[i, j] in j of a row-major tensor, A[i, j] in i of a T.StridedTensor whose
// first stride is 1) or not at all (invariant), runs in groups of W iterations:
//   for g in T.unroll(E / W):                   (no loop when W == E)
//     vld[0:+w] = A[.. g*W ..:+w]; ...           vector loads, w as each access's alignment allows
//     inv[0] = C[..]                             an invariant load, once a group
//     vst[v] = f(vld[v], inv[0])   v < W         the body's arithmetic, lane by lane
//     B[.. g*W ..:+w] = vst[0:+w]; ...           vector stores
// (a plain copy of one type moves memory to memory: B[..:+w] = A[..:+w]). W is the widest
// power of two dividing E, at most 16 bytes of the narrowest element, for which each access
// is contiguous or invariant within every group (C[i, j // K] is invariant in groups of
// W <= K when the group starts at a multiple of K's factor); the T.assume(n % d == 0) hints
// ahead of the loop count as divisibility. A loop no W >= 2 fits, or where no access can be
// a vector, stays a loop, unrolled (#pragma unroll) as before.
// A load of the stored buffer must read exactly the element its lane stores (B[i] = B[i] +
// 1): any other would see the group's stores in another order.
#include <numeric>

#include "ir/functor.h"
#include "ir/hash.h"
#include "transform/partition.h"
#include "transform/passes.h"

namespace tegula::transform {

using namespace ir;

namespace {

// Memory a vector can move along its index: not under a T.Layout, not 4-bit packed.
bool plain_memory(const Kernel& k, const Buffer& b) {
  return is_memory(b) && !k.global_layouts.count(b.get()) && !(b->scope == Scope::Global && b->dtype.is_packed());
}

// The memory loads of an expression, in pre-order; `nested` is set when a memory load sits
// inside another's indices or under a select (a masked load), which this pass leaves alone.
class Loads : public IRVisitor {
 public:
  std::vector<const BufferLoadNode*> loads;
  bool nested = false;
  void visit_BufferLoad(const BufferLoadNode* op) override {
    if (is_memory(op->buffer)) {
      nested |= depth_ > 0;
      loads.push_back(op);
    }
    ++depth_;
    IRVisitor::visit_BufferLoad(op);
    --depth_;
  }
  void visit_Select(const SelectNode* op) override {
    ++depth_;
    IRVisitor::visit_Select(op);
    --depth_;
  }

 private:
  int depth_ = 0;
};

// Replaces the k-th memory load (pre-order, as Loads counts) by replacement[k] when set.
class ReplaceLoads : public IRMutator {
 public:
  explicit ReplaceLoads(const std::vector<Expr>& r) : r_(r) {}
  Expr mutate_BufferLoad(const Expr& self, const BufferLoadNode* op) override {
    if (!is_memory(op->buffer)) return IRMutator::mutate_BufferLoad(self, op);
    size_t k = next_++;
    return k < r_.size() && r_[k] ? r_[k] : self;
  }

 private:
  const std::vector<Expr>& r_;
  size_t next_ = 0;
};

class VectorizeLoops : public IRMutator {
 public:
  VectorizeLoops(Kernel& k, PassContext& ctx) : k_(k), ctx_(ctx), an_(kernel_analyzer(k)) {}

  std::vector<Buffer> temps;

  // A T.assume(n % d == 0) holds for the statements after it.
  Stmt mutate_Seq(const Stmt& self, const SeqNode* op) override {
    Analyzer saved = an_;
    std::vector<Stmt> out;
    bool changed = false;
    for (const Stmt& s : op->seq) {
      out.push_back(mutate(s));
      changed |= !out.back().same_as(s);
      note_divisor(s);
    }
    an_ = saved;
    return changed ? make_seq(out, op->loc) : self;
  }

  Stmt mutate_For(const Stmt& self, const ForNode* op) override {
    Analyzer saved = an_;
    an_.bind_loop(op->var, op->min, op->extent);
    Stmt body = mutate(op->body);
    an_ = saved;
    if (op->for_kind != ForKind::Vectorized) {
      return body.same_as(op->body) ? self
                                    : make_for(op->var, op->min, op->extent, op->for_kind, body, op->num_stages, op->loc);
    }
    if (Stmt v = ctx_.options.disable_vectorize ? Stmt() : vectorize(op, body)) return v;
    return make_for(op->var, op->min, op->extent, ForKind::Unrolled, body, 0, op->loc);
  }

 private:
  void note_divisor(const Stmt& s) {
    auto* ev = s.as<EvaluateNode>();
    auto* call = ev ? ev->value.as<CallNode>() : nullptr;
    if (!call || call->op != "assume") return;
    auto* eq = call->args.at(0).as<BinaryNode>();
    if (!eq || eq->op != BinaryOp::EQ || !is_const_int(eq->b, 0)) return;
    auto* mod = eq->a.as<BinaryNode>();
    if (!mod || (mod->op != BinaryOp::Mod && mod->op != BinaryOp::FloorMod) || !mod->a.as<VarNode>()) return;
    if (const int64_t* d = as_const_int(mod->b)) an_.set_divisor(mod->a, *d);
  }

  // Whether e (lane v's) equals e0 (lane 0's) for a lane v steps on in a group that starts
  // where known_divisor says: equal after simplification, or an integer division x // d
  // whose x moves by v < gcd(divisor of x0, d), so that no multiple of d lies between.
  bool same_value(const Analyzer& an, const Expr& e, const Expr& e0) const {
    if (is_const_int(an.simplify(make_binary(BinaryOp::Sub, e, e0)), 0)) return true;
    auto* b = e.as<BinaryNode>();
    auto* b0 = e0.as<BinaryNode>();
    if (!b || !b0 || b->op != b0->op) return false;
    if (b->op == BinaryOp::FloorDiv || b->op == BinaryOp::Div) {
      const int64_t* d = as_const_int(b->b);
      if (!d || *d <= 0 || !is_const_int(an.simplify(make_binary(BinaryOp::Sub, b->b, b0->b)), 0)) return false;
      const int64_t* step = as_const_int(an.simplify(make_binary(BinaryOp::Sub, b->a, b0->a)));
      if (!step || *step < 0) return false;
      if (b->op == BinaryOp::Div && an.bound(b0->a).lo < 0) return false;  // truncation: non-negative only
      int64_t div = an.known_divisor(b0->a);
      int64_t g = div == 0 ? *d : std::gcd(div, *d);
      return *step < g;
    }
    if (b->op == BinaryOp::Add || b->op == BinaryOp::Sub || b->op == BinaryOp::Mul) {
      return same_value(an, b->a, b0->a) && same_value(an, b->b, b0->b);
    }
    return false;
  }

  // 1: lanes move one element a step in memory; 0: every lane the same element; -1 neither.
  int classify(const Analyzer& an, const Buffer& b, const std::vector<std::vector<Expr>>& idx) const {
    bool invariant = true;
    for (size_t v = 1; v < idx.size() && invariant; ++v) {
      for (size_t d = 0; d < idx[v].size(); ++d) invariant &= same_value(an, idx[v][d], idx[0][d]);
    }
    if (invariant) return 0;
    if (!plain_memory(k_, b)) return -1;
    Expr flat0 = flat_offset(b, idx[0]);
    for (size_t v = 1; v < idx.size(); ++v) {
      Expr step = an.simplify(make_binary(BinaryOp::Sub, flat_offset(b, idx[v]), flat0));
      if (!is_const_int(step, int64_t(v))) return -1;
    }
    return 1;
  }

  // The widest vector (a power of two up to `group` lanes and 16 bytes) that an access
  // starting at idx is aligned for.
  int width(const Analyzer& an, const Buffer& b, const std::vector<Expr>& idx, int group) const {
    int w = std::min(group, std::max(1, 16 / b->dtype.bytes()));
    int64_t div = an.known_divisor(an.simplify(flat_offset(b, idx)));
    if (div == 0) div = int64_t(1) << 30;
    while (w > 1 && div % w != 0) w /= 2;
    return w;
  }

  Stmt vectorize(const ForNode* op, const Stmt& body) {
    const int64_t* extent = as_const_int(op->extent);
    if (!extent || *extent < 2) return {};
    std::vector<Stmt> hints;
    Stmt store;
    auto consider = [&](const Stmt& s) {
      auto* ev = s.as<EvaluateNode>();
      auto* call = ev ? ev->value.as<CallNode>() : nullptr;
      if (call && call->op == "assume") {
        hints.push_back(s);
        return true;
      }
      if (s.as<BufferStoreNode>() && !store) {
        store = s;
        return true;
      }
      return false;
    };
    if (auto* seq = body.as<SeqNode>()) {
      for (const Stmt& s : seq->seq) {
        if (!consider(s)) return {};
      }
    } else if (!consider(body)) {
      return {};
    }
    auto* st = store.as<BufferStoreNode>();
    if (!st || !plain_memory(k_, st->buffer) || st->value.dtype().lanes != 1) return {};
    Loads all;
    all.visit(body);
    if (all.nested) return {};
    int narrowest = st->buffer->dtype.bytes();
    for (auto* l : all.loads) {
      if (l->dtype.lanes != 1) return {};
      narrowest = std::min(narrowest, l->buffer->dtype.bytes());
    }
    int widest = int(std::min<int64_t>(*extent, 16 / narrowest));
    for (int w = 1 << 4; w >= 2; w /= 2) {
      if (w > widest || *extent % w) continue;
      if (Stmt s = group(op, store, hints, w)) return s;
    }
    return {};
  }

  // The loop in groups of W lanes, or null when its accesses do not fit W.
  Stmt group(const ForNode* op, const Stmt& store, const std::vector<Stmt>& hints, int W) {
    int64_t groups = *as_const_int(op->extent) / W;
    Expr g = make_var(op->var.as<VarNode>()->name + "_group", op->var.dtype(), op->loc);
    Analyzer an = an_;
    an.bind(g, 0, groups);
    Expr start = groups == 1 ? op->min : op->min + g * W;
    std::vector<Stmt> lanes;
    std::vector<Loads> loads(W);
    for (int v = 0; v < W; ++v) {
      lanes.push_back(an.simplify(substitute(store, {{op->var, an.simplify(start + make_int(v, op->var.dtype()))}})));
      auto* st = lanes.back().as<BufferStoreNode>();
      if (!st) return {};
      loads[v].visit(st->value);
      if (loads[v].loads.size() != loads[0].loads.size()) return {};
    }
    auto stores = [&](int v) { return lanes[v].as<BufferStoreNode>(); };
    const Buffer& dst = stores(0)->buffer;
    std::vector<std::vector<Expr>> sidx;
    for (int v = 0; v < W; ++v) sidx.push_back(stores(v)->indices);
    if (classify(an, dst, sidx) != 1) return {};
    size_t n = loads[0].loads.size();
    std::vector<int> kind(n), lane_width(n, 1);
    bool any_vector = false;
    int store_width = width(an, dst, sidx[0], W);
    any_vector |= store_width > 1;
    for (size_t j = 0; j < n; ++j) {
      const Buffer& src = loads[0].loads[j]->buffer;
      std::vector<std::vector<Expr>> idx;
      for (int v = 0; v < W; ++v) idx.push_back(loads[v].loads[j]->indices);
      kind[j] = classify(an, src, idx);
      if (kind[j] < 0) return {};
      if (src == dst) {
        // Only the element the lane itself stores.
        Expr gap = an.simplify(make_binary(BinaryOp::Sub, flat_offset(src, idx[0]), flat_offset(dst, sidx[0])));
        if (kind[j] != 1 || !is_const_int(gap, 0)) return {};
      }
      if (kind[j] == 1) {
        lane_width[j] = width(an, src, idx[0], W);
        any_vector |= lane_width[j] > 1;
      }
    }
    if (!any_vector) return {};

    std::vector<Stmt> out;
    for (int v = 0; v < W; ++v) {
      for (const Stmt& h : hints) {
        out.push_back(an.simplify(substitute(h, {{op->var, an.simplify(start + make_int(v, op->var.dtype()))}})));
      }
    }
    // A copy of one type: memory to memory, one vector at a time.
    const BufferLoadNode* copy = n == 1 && kind[0] == 1 && lane_width[0] == store_width ? loads[0].loads[0] : nullptr;
    if (copy && stores(0)->value.get() == static_cast<const ExprNode*>(copy) && copy->buffer->dtype == dst->dtype) {
      for (int p = 0; p < W; p += store_width) {
        const BufferLoadNode* ld = loads[p].loads[0];
        out.push_back(make_store(dst, stores(p)->indices, make_load(ld->buffer, ld->indices, ld->loc, store_width),
                                 stores(p)->loc));
      }
      return finish(op, g, groups, out);
    }
    std::vector<std::vector<Expr>> replacement(W, std::vector<Expr>(n));
    for (size_t j = 0; j < n; ++j) {
      const BufferLoadNode* first = loads[0].loads[j];
      Buffer tmp = make_buffer(ctx_.fresh_name(kind[j] ? "vld" : "inv"), Scope::Local, first->buffer->dtype,
                               {make_int(kind[j] ? W : 1)}, op->loc);
      temps.push_back(tmp);
      if (kind[j] == 0) {
        out.push_back(make_store(tmp, {make_int(0)}, make_load(first->buffer, first->indices, first->loc), first->loc));
        for (int v = 0; v < W; ++v) replacement[v][j] = make_load(tmp, {make_int(0)}, first->loc);
        continue;
      }
      for (int p = 0; p < W; p += lane_width[j]) {
        const BufferLoadNode* ld = loads[p].loads[j];
        out.push_back(make_store(tmp, {make_int(p)}, make_load(ld->buffer, ld->indices, ld->loc, lane_width[j]), ld->loc));
      }
      for (int v = 0; v < W; ++v) replacement[v][j] = make_load(tmp, {make_int(v)}, loads[v].loads[j]->loc);
    }
    Buffer result = make_buffer(ctx_.fresh_name("vst"), Scope::Local, dst->dtype, {make_int(W)}, op->loc);
    temps.push_back(result);
    for (int v = 0; v < W; ++v) {
      out.push_back(make_store(result, {make_int(v)}, ReplaceLoads(replacement[v]).mutate(stores(v)->value), stores(v)->loc));
    }
    for (int p = 0; p < W; p += store_width) {
      out.push_back(make_store(dst, stores(p)->indices, make_load(result, {make_int(p)}, stores(p)->loc, store_width),
                               stores(p)->loc));
    }
    return finish(op, g, groups, out);
  }

  Stmt finish(const ForNode* op, const Expr& g, int64_t groups, const std::vector<Stmt>& out) const {
    Stmt body = make_seq(out, op->loc);
    if (groups == 1) return body;
    return make_for(g, make_int(0, g.dtype()), make_int(groups, g.dtype()), ForKind::Unrolled, body, 0, op->loc);
  }

  Kernel& k_;
  PassContext& ctx_;
  Analyzer an_;
};

}  // namespace

void vectorize_loops(Kernel& k, PassContext& ctx) {
  VectorizeLoops v(k, ctx);
  k.body = v.mutate(k.body);
  k.allocs.insert(k.allocs.end(), v.temps.begin(), v.temps.end());
}

}  // namespace tegula::transform
