// The reference interpreter's values of several lanes: T.reinterpret, the explicit-width
// loads and stores (ir/wide_access.h), stores of a vector into a slice, vector lets, casts
// of a vector lane by lane.
//
// A vector is `lanes` doubles, each holding what its element type holds. An access that
// runs past a global tensor's edge, even in part, is masked whole (a load gives 0, a store
// is skipped), as the lowered code masks it.
#include "interp/reference_impl.h"
#include "ir/wide_access.h"

namespace tegula::interp::ref {

using namespace ir;

namespace {

struct Elements {
  int slot;
  std::vector<ExprFn> idx;
  int lanes;
  SourceLoc loc;
  // The elements' addresses, or false when any is past a global tensor's edge.
  bool resolve(Frame& f, double** out) const {
    Buf& b = f.bufs[slot];
    int64_t at[kMaxRank];
    for (size_t d = 0; d < idx.size(); ++d) at[d] = to_index(idx[d](f), b, d, loc);
    size_t along = vector_dim(*b.node);
    int64_t first = at[along];
    for (int l = 0; l < lanes; ++l) {
      at[along] = first + l;
      out[l] = element(b, at, loc);
      if (!out[l]) return false;
    }
    return true;
  }
};

}  // namespace

VecFn Compiler::vexpr(const Expr& e, const SourceLoc& at) {
  const SourceLoc& loc = e->loc.known() ? e->loc : at;
  int lanes = e.dtype().lanes;
  auto elements = [&](const BufferLoadNode* l) {
    Elements el{buffer_slot(l->buffer, loc), {}, l->dtype.lanes, loc};
    for (auto& i : l->indices) el.idx.push_back(expr(i, loc));
    return el;
  };
  if (auto* v = e.as<VarNode>(); v && lanes > 1) {
    int slot = var_slot(e.get());
    internal_assert(slot >= 0) << "reference: vector variable '" << v->name << "' has no value";
    return [slot, lanes](Frame& f, double* out) {
      for (int l = 0; l < lanes; ++l) out[l] = f.vars[slot + l];
    };
  }
  if (auto* c = e.as<CallNode>(); c && c->op == "reinterpret") {
    DataType from = c->args.at(0).dtype(), to = c->dtype;
    VecFn v = vexpr(c->args[0], loc);
    return [v, from, to](Frame& f, double* out) {
      double in[32];
      v(f, in);
      reinterpret_bits(from, in, to, out);
    };
  }
  if (auto* c = e.as<CallNode>()) {
    if (auto w = wide_access(c)) {
      Elements el = elements(w->addr);
      ExprFn pred = w->pred ? expr(w->pred, loc) : ExprFn();
      DataType from = w->addr->dtype, to = c->dtype;
      return [el, pred, from, to](Frame& f, double* out) {
        double* p[32];
        if ((pred && pred(f) == 0) || !el.resolve(f, p)) {
          for (int l = 0; l < to.lanes; ++l) out[l] = 0;
          return;
        }
        double in[32];
        for (int l = 0; l < el.lanes; ++l) in[l] = *p[l];
        reinterpret_bits(from, in, to, out);
      };
    }
  }
  if (auto* l = e.as<BufferLoadNode>(); l && lanes > 1) {
    Elements el = elements(l);
    return [el](Frame& f, double* out) {
      double* p[32];
      bool inside = el.resolve(f, p);
      for (int i = 0; i < el.lanes; ++i) out[i] = inside ? *p[i] : 0.0;
    };
  }
  if (auto* c = e.as<CastNode>(); c && lanes > 1) {
    // Lane by lane, as a scalar cast (the lowered code's pair conversions, pack_casts.cc).
    DataType from = c->value.dtype().element(), to = c->dtype.element();
    VecFn v = vexpr(c->value, loc);
    return [v, from, to, lanes](Frame& f, double* out) {
      double in[32];
      v(f, in);
      for (int l = 0; l < lanes; ++l) out[l] = cast_to_dtype(from, to, in[l]);
    };
  }
  if (auto* s = e.as<SelectNode>(); s && lanes > 1) {
    ExprFn c = expr(s->cond, loc);
    VecFn t = vexpr(s->t, loc), x = vexpr(s->f, loc);
    return [c, t, x](Frame& f, double* out) { c(f) != 0 ? t(f, out) : x(f, out); };
  }
  internal_assert(lanes == 1) << "reference: cannot interpret a " << e.dtype().name() << " "
                              << node_kind_name(e.kind()) << " at " << loc.str();
  ExprFn v = expr(e, loc);
  return [v](Frame& f, double* out) { *out = v(f); };
}

StmtFn Compiler::wide_store(const CallNode* c, const SourceLoc& loc) {
  WideAccess w = *wide_access(c);
  Elements el{buffer_slot(w.addr->buffer, loc), {}, w.addr->dtype.lanes, loc};
  for (auto& i : w.addr->indices) el.idx.push_back(expr(i, loc));
  VecFn value = vexpr(w.value, loc);
  ExprFn pred = w.pred ? expr(w.pred, loc) : ExprFn();
  DataType from = w.value.dtype(), to = w.addr->dtype;
  return [el, value, pred, from, to](Frame& f) {
    if (pred && pred(f) == 0) return;
    double in[32], bits[32];
    value(f, in);
    reinterpret_bits(from, in, to, bits);
    double* p[32];
    if (!el.resolve(f, p)) return;
    for (int l = 0; l < el.lanes; ++l) *p[l] = bits[l];
  };
}

StmtFn Compiler::vector_store(const BufferStoreNode* s) {
  const SourceLoc& loc = s->loc;
  Elements el{buffer_slot(s->buffer, loc), {}, s->value.dtype().lanes, loc};
  for (auto& i : s->indices) el.idx.push_back(expr(i, loc));
  VecFn value = vexpr(s->value, loc);
  DataType t = s->buffer->dtype;
  return [el, value, t](Frame& f) {
    double v[32];
    value(f, v);
    double* p[32];
    if (!el.resolve(f, p)) return;
    for (int l = 0; l < el.lanes; ++l) *p[l] = round_to_dtype(t, v[l]);
  };
}

}  // namespace tegula::interp::ref
