// Pass: resolve_views.
//
// Expects: copy, fill and atomic_add already expanded into element loops
// (expand_tile_ops), so a view (T.reshape, T.view, T.Tensor(shape, dtype, buf.data);
// BufferNode::view_of) is read and written only by element accesses, and by the tile ops
// checked below. Guarantees: no view is left. Each access becomes one of the buffer the
// view is of (a view of a view: of the first), at the same row-major position:
//
//   A_r = T.reshape(A_s, [N // M, M])      A_r[i, j]  ->  A_s[i * M + j]
//   B_r = T.reshape(B_f, [N])              B_r[i]     ->  B_f[i // M, i % M]
//
// An access past the edge of a view of a global tensor reads 0 or stores nothing, as one
// past the tensor's own edge does.
//
// A view of another dtype (T.view(KV_shared, shape, dtype="float32") of a bfloat16 buffer)
// reads and writes the bytes of the elements it covers: each of its elements is one
// explicit-width access (ir/wide_access.h) of `ratio` consecutive elements of the buffer,
// its bits reinterpreted:
//
//   V = T.view(S, [R // 2, C], "float32")   (S bfloat16 (R, C))
//   V[i, j]      ->  reinterpret<float32>(load_shared_32(S[(i*C + j)*2 / C, (i*C + j)*2 % C] x2))
//   V[i, j] = v  ->  store_shared_32(S[...] x2, v)
//
// simplified with the ranges of the loops around it, so an aligned reshape reads as a
// plain affine index and the later passes (layouts, vectorising) treat it like any other.
#include <map>
#include <set>

#include "ir/analyzer.h"
#include "ir/functor.h"
#include "ir/wide_access.h"
#include "ops/tile_op.h"
#include "transform/passes.h"

namespace tegula::transform {

namespace {

using namespace ir;

const Buffer& root_of(const Buffer& b) { return b->view_of ? root_of(b->view_of) : b; }

class Resolver : public IRMutator {
 public:
  explicit Resolver(Kernel& k) : k_(k), an_(kernel_analyzer(k)) {}

  Expr mutate_BufferLoad(const Expr& self, const BufferLoadNode* op) override {
    if (!op->buffer->view_of) return IRMutator::mutate_BufferLoad(self, op);
    std::vector<Expr> idx = indices(op->indices);
    const Buffer& root = root_of(op->buffer);
    Expr load;
    if (int ratio = bytes_ratio(op->buffer, op->loc); ratio > 0) {
      user_assert(op->dtype.lanes == 1, op->loc) << "a vector read of '" << op->buffer->name << "', a view of another dtype";
      int bits = op->dtype.bits;
      Expr raw = make_call(wide_access_op(false, root->scope, bits),
                           {make_load(root, position(op->buffer, idx), op->loc, ratio)}, wide_access_type(bits), op->loc);
      load = make_call("reinterpret", {raw}, op->dtype, op->loc);
    } else {
      load = make_load(root, position(op->buffer, idx), op->loc, op->dtype.lanes);
    }
    Expr inside = edge_guard(op->buffer, idx);
    return inside ? make_select(inside, load, make_cast(load.dtype(), make_int(0)), op->loc) : load;
  }
  Stmt mutate_BufferStore(const Stmt& self, const BufferStoreNode* op) override {
    if (!op->buffer->view_of) return IRMutator::mutate_BufferStore(self, op);
    std::vector<Expr> idx = indices(op->indices);
    const Buffer& root = root_of(op->buffer);
    Stmt store;
    if (int ratio = bytes_ratio(op->buffer, op->loc); ratio > 0) {
      Expr value = mutate(op->value);
      user_assert(value.dtype().lanes == 1, op->loc) << "a vector write of '" << op->buffer->name << "', a view of another dtype";
      if (value.dtype() != op->buffer->dtype) value = make_cast(op->buffer->dtype, value);
      int bits = op->buffer->dtype.bits;
      value = make_call("reinterpret", {value}, wide_access_type(bits), op->loc);
      store = make_evaluate(make_call(wide_access_op(true, root->scope, bits),
                                      {make_load(root, position(op->buffer, idx), op->loc, ratio), value},
                                      DataType::i32(), op->loc),
                            op->loc);
    } else {
      store = make_store(root, position(op->buffer, idx), mutate(op->value), op->loc);
    }
    Expr inside = edge_guard(op->buffer, idx);
    return inside ? make_if(inside, store, {}, op->loc) : store;
  }
  std::vector<Expr> indices(const std::vector<Expr>& v) {
    bool changed = false;
    return mutate_all(v, &changed);
  }
  Stmt mutate_For(const Stmt& self, const ForNode* op) override {
    if (op->for_kind == ForKind::Parallel && !keep_nests_) {
      if (Stmt s = over_root(self)) return mutate(s);
    }
    const int64_t* lo = as_const_int(op->min);
    const int64_t* n = as_const_int(op->extent);
    if (lo && n && *n > 0) an_.bind(op->var, *lo, *lo + *n);
    return IRMutator::mutate_For(self, op);
  }
  // A reduction or gemm takes its regions whole, laid out as buffers of their own: a view
  // among them is copied into a buffer of its shape first (and the result back, for the
  // op's destination, its last region), element loops the rest of this pass resolves.
  Stmt mutate_TileOp(const Stmt& self, const TileOpNode* op) override {
    bool any = false;
    for (const BufferRegion& r : op->regions) any = any || r.buffer->view_of;
    if (!any) return IRMutator::mutate_TileOp(self, op);
    user_assert(op->op == "reduce" || op->op == "gemm", op->loc)
        << "T." << op->op << " on a view (T.reshape / T.view) of '" << root_of(op->regions[0].buffer)->name
        << "' is not supported: copy the view into a buffer of its own shape first";
    std::vector<Stmt> before, after;
    std::vector<BufferRegion> regions = op->regions;
    for (size_t i = 0; i < regions.size(); ++i) {
      const Buffer& view = regions[i].buffer;
      if (!view->view_of) continue;
      Buffer own = make_buffer(view->name + "_whole", view->scope, view->dtype, view->shape, view->loc);
      k_.allocs.push_back(own);
      // Laid out over the copy's own shape: the view's reads cross layouts if they must.
      keep_nests_ = true;
      before.push_back(mutate(element_copy(view, own, op->loc)));
      keep_nests_ = false;
      if (i + 1 == regions.size()) after.push_back(mutate(element_copy(own, view, op->loc)));
      regions[i].buffer = own;
    }
    before.push_back(make_tile_op(op->op, regions, op->args, op->attrs, op->loc));
    for (Stmt& s : after) before.push_back(s);
    return make_seq(before, op->loc);
  }

 private:
  // A T.Parallel nest over the whole of a fragment's view, indexing it by its variables
  // (a copy into or out of the view, a loop the author wrote over it): the same nest over
  // the fragment's own shape, the view's indices computed from the fragment's, so that the
  // fragment is indexed by the loop variables and layout inference lays the nest out with
  // it (other fragments the body reads get the view's indices, as div / mod of the loop
  // variables):
  //
  //   for i in T.Parallel(256): v[i] = X[i]   (v a view (256,) of f (8, 32))
  //   ->  for i, j in T.Parallel(8, 32): f[i, j] = X[i * 32 + j]
  //
  // Null when the nest is not of that form.
  Stmt over_root(const Stmt& nest) {
    std::vector<const ForNode*> loops;
    Stmt body = nest;
    while (auto* f = body.as<ForNode>()) {
      if (f->for_kind != ForKind::Parallel || !is_const_int(f->min, 0) || !as_const_int(f->extent)) break;
      loops.push_back(f);
      body = f->body;
    }
    FragmentUses uses;
    uses.visit(body);
    if (uses.views.size() != 1) return {};
    const Buffer view = uses.views.begin()->second;
    const Buffer& root = root_of(view);
    if (loops.size() != view->shape.size() || root->scope != Scope::Fragment) return {};
    for (size_t d = 0; d < loops.size(); ++d) {
      const int64_t* n = as_const_int(view->shape[d]);
      if (!n || *n != *as_const_int(loops[d]->extent)) return {};
    }
    for (const std::vector<Expr>* idx : uses.indices) {
      for (size_t d = 0; d < loops.size(); ++d) {
        if (!(*idx)[d].same_as(loops[d]->var)) return {};
      }
    }
    std::vector<Expr> extents = root->shape;
    Stmt out = ops::make_parallel_nest(
        extents,
        [&](const std::vector<Expr>& u) {
          Expr flat;
          for (size_t d = 0; d < u.size(); ++d) flat = d ? flat * extents[d] + u[d] : u[d];
          std::vector<std::pair<Expr, Expr>> map;
          for (size_t d = loops.size(); d-- > 0;) {
            Expr at = d == 0 ? flat : floormod(flat, view->shape[d]);
            map.emplace_back(loops[d]->var, at);
            if (d) flat = floordiv(flat, view->shape[d]);
          }
          return substitute(Redirect(view.get(), root, u).mutate(body), map);
        },
        nest->loc);
    return out;
  }

  // The fragments a nest body reads or writes: views (by address) with the indices of each
  // access, and other fragments.
  struct FragmentUses : IRVisitor {
    std::map<const BufferNode*, Buffer> views;
    std::set<const BufferNode*> others;
    std::vector<const std::vector<Expr>*> indices;
    void note(const Buffer& b, const std::vector<Expr>& idx) {
      if (b->view_of && root_of(b)->scope == Scope::Fragment) {
        views.emplace(b.get(), b);
        indices.push_back(&idx);
      } else if (b->scope == Scope::Fragment) {
        others.insert(b.get());
      }
    }
    void visit_BufferLoad(const BufferLoadNode* op) override {
      note(op->buffer, op->indices);
      IRVisitor::visit_BufferLoad(op);
    }
    void visit_BufferStore(const BufferStoreNode* op) override {
      note(op->buffer, op->indices);
      IRVisitor::visit_BufferStore(op);
    }
  };

  // Accesses of `view` become accesses of `root` at `at`.
  class Redirect : public IRMutator {
   public:
    Redirect(const BufferNode* view, Buffer root, std::vector<Expr> at) : view_(view), root_(std::move(root)), at_(std::move(at)) {}
    Expr mutate_BufferLoad(const Expr& self, const BufferLoadNode* op) override {
      if (op->buffer.get() != view_) return IRMutator::mutate_BufferLoad(self, op);
      return make_load(root_, at_, op->loc, op->dtype.lanes);
    }
    Stmt mutate_BufferStore(const Stmt& self, const BufferStoreNode* op) override {
      if (op->buffer.get() != view_) return IRMutator::mutate_BufferStore(self, op);
      return make_store(root_, at_, mutate(op->value), op->loc);
    }

   private:
    const BufferNode* view_;
    Buffer root_;
    std::vector<Expr> at_;
  };

  // A global tensor's element loops read 0 and skip stores past its edge (the masking of
  // partition_loops); past a view's edge the same must hold, though the position may
  // still be inside the tensor (a row of the view too long wraps into the next one).
  // The condition that idx is inside the view, or null when it provably is or the view
  // is of a buffer the kernel owns (an index outside one is the author's error).
  Expr edge_guard(const Buffer& view, const std::vector<Expr>& idx) {
    if (root_of(view)->scope != Scope::Global) return {};
    Expr inside;
    for (size_t d = 0; d < idx.size(); ++d) {
      Expr below = an_.simplify(idx[d] < view->shape[d]);
      Expr above = an_.simplify(make_binary(BinaryOp::GE, idx[d], make_int(0)));
      for (const Expr& c : {above, below}) {
        if (an_.can_prove(c)) continue;
        inside = inside ? (inside && c) : c;
      }
    }
    return inside;
  }

  // How many elements of root_of(view) one element of the view covers when their dtypes
  // differ (0 when they are one dtype): a whole number, checked here for chains of views.
  static int bytes_ratio(const Buffer& view, const SourceLoc& loc) {
    const Buffer& root = root_of(view);
    if (view->dtype == root->dtype) return 0;
    int vb = view->dtype.bits, rb = root->dtype.bits;
    user_assert(rb >= 8 && (vb == 32 || vb == 64) && vb % rb == 0 && view->dtype.lanes == 1, loc)
        << "'" << view->name << "' views '" << root->name << "' (" << root->dtype.name() << ") as "
        << view->dtype.name() << ": a view of another dtype takes 4- or 8-byte elements, each a whole number of the "
        << "buffer's";
    user_assert(root->scope == Scope::Shared || root->scope == Scope::Global, loc)
        << "'" << view->name << "' views '" << root->name << "' as another dtype: only shared and global buffers "
        << "can be reinterpreted ('" << root->name << "' is " << scope_name(root->scope) << ")";
    return vb / rb;
  }

  // The indices into root_of(view) of view[idx]: the row-major position of idx under the
  // view's shape, spread over the root's shape (each view in the chain in turn); of the
  // first element it covers for a view of wider elements.
  std::vector<Expr> position(const Buffer& view, std::vector<Expr> idx) {
    for (Buffer b = view; b->view_of; b = b->view_of) {
      Expr flat;
      for (size_t d = 0; d < b->shape.size(); ++d) flat = d ? flat * b->shape[d] + idx[d] : idx[d];
      const Buffer& base = b->view_of;
      if (b->dtype.bits != base->dtype.bits) flat = flat * int64_t(b->dtype.bits / base->dtype.bits);
      idx.assign(base->shape.size(), Expr());
      for (size_t d = base->shape.size(); d-- > 0;) {
        bool outer = d == 0;
        idx[d] = outer ? flat : floormod(flat, base->shape[d]);
        if (!outer) flat = floordiv(flat, base->shape[d]);
      }
    }
    for (Expr& i : idx) i = an_.simplify(i);
    return idx;
  }

  // dst[v] = src[v] over the whole of two buffers of one shape: T.Parallel loops, or, in a
  // thread's own local memory, unrolled ones.
  static Stmt element_copy(const Buffer& src, const Buffer& dst, const SourceLoc& loc) {
    auto body = [&](const std::vector<Expr>& v) { return make_store(dst, v, make_load(src, v, loc), loc); };
    if (src->scope != Scope::Local) return ops::make_parallel_nest(src->shape, body, loc);
    std::vector<Expr> vars;
    for (size_t d = 0; d < src->shape.size(); ++d) vars.push_back(make_var("v" + std::to_string(d), DataType::i32(), loc));
    Stmt s = body(vars);
    for (size_t d = vars.size(); d-- > 0;) s = make_for(vars[d], make_int(0), src->shape[d], ForKind::Unrolled, s, 0, loc);
    return s;
  }

  Kernel& k_;
  Analyzer an_;
  bool keep_nests_ = false;  // while resolving the copy of a view into its own buffer
};

}  // namespace

void resolve_views(Kernel& k, PassContext&) {
  if (k.views.empty()) return;
  for (const Buffer& v : k.views) {
    user_assert(!k.global_layouts.count(root_of(v).get()), v->loc)
        << "'" << v->name << "' is a view of '" << root_of(v)->name << "', whose elements are stored in the order "
        << "of a T.Layout: a view of it is not supported";
    user_assert(root_of(v)->strides.empty() && !(root_of(v)->scope == Scope::Global && v->dtype.is_packed()), v->loc)
        << "'" << v->name << "' is a view of '" << root_of(v)->name << "', a T.StridedTensor or a packed 4-bit "
        << "tensor: a view of it is not supported";
  }
  k.body = Resolver(k).mutate(k.body);
  k.views.clear();
}

}  // namespace tegula::transform
