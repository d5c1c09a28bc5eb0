// Pass: pack_casts.
//
// Expects: per-thread code (partition_loops and lower_tile_ops done): register arrays
// (Local buffers) indexed by constants, as partitioning and the vectorisers leave them.
// Guarantees: two neighbouring statements that convert into neighbouring registers,
//   r[c] = T(s[d]);  r[c + 1] = T(s[d + 1]);          c and d even
// become one conversion of the pair,
//   r[c:+2] = Tx2(s[d:+2]);
// and two that convert computed values, r[c] = T(e0); r[c + 1] = T(e1), go through a pair
// of registers: pair[0] = e0; pair[1] = e1; r[c:+2] = Tx2(pair[0:+2]) (e1 must not read r);
// where the target converts the two types two at a time (converts_pairs: CUDA's
// __float22half2_rn, __half22float2, __nv_cvt_float2_to_fp8x2, ...). Four in a row are two
// pairs; an odd one out stays as it was. Each element converts exactly as it would alone
// (round to nearest even; the same NaN, infinity and 8-bit saturation): the pair
// instructions are the scalar conversion done twice. Two conversions each under the same
// test (a thread's slots that not every thread has) become one test around the pair.
//
// Two stores of the two 16-bit halves of one 32-bit value into neighbouring registers,
//   r[c] = reinterpret<T>(uint16(x));  r[c + 1] = reinterpret<T>(uint16(x >> 16))
// (T a 16-bit type, c even; `& 0xffff` and `>> 0` around either half allowed; without the
// reinterpret when r holds 16-bit integers) become one store of x's bits, r[c:+2] =
// reinterpret<Tx2>(x): the two halves are x's own, so nothing is computed twice and no
// instruction repacks them (a weight dequantizer builds two 16-bit weights from one 32-bit
// mask-and-XOR this way; the CUDA compiler would narrow each half and repack them).
// Two neighbouring `let v = e` around such stores, e the same and reading no r, are one.
//
// Example, a float32 -> float16 T.copy of 4 elements a thread, after vectorisation:
//   vst[0] = float16(vld[0]); vst[1] = float16(vld[1]); vst[2] = ...; vst[3] = ...
// becomes
//   vst[0:+2] = float16x2(vld[0:+2]); vst[2:+2] = float16x2(vld[2:+2])
#include "ir/functor.h"
#include "ir/hash.h"
#include "transform/passes.h"
#include "transform/seq_windows.h"

namespace tegula::transform {

using namespace ir;

bool converts_pairs(DataType from, DataType to, int sm) {
  DataType f32 = DataType::f32(), f16 = DataType::f16(), bf16 = DataType::bf16();
  if ((from == f32 && to == f16) || (from == f16 && to == f32)) return true;
  // cvt.rn.bf16x2.f32 from sm_80 (before, CUDA emulates it).
  if ((from == f32 && to == bf16) || (from == bf16 && to == f32)) return sm >= 80;
  // cvt.rn.satfinite.{e4m3,e5m2}x2.{f32,f16x2} and cvt.rn.f16x2.{e4m3,e5m2}x2 from sm_89.
  if (to.is_float8() && to.lanes == 1) return sm >= 89 && (from == f32 || from == f16);
  if (from.is_float8() && from.lanes == 1) return sm >= 89 && (to == f32 || to == f16);
  return false;
}

namespace {

// r[c] = T(x) with r a register array of one dimension and c a constant; x is s[d] when
// it is an element of another register array at a constant index.
struct Conversion {
  const BufferStoreNode* store = nullptr;
  const CastNode* cast = nullptr;
  const BufferLoadNode* load = nullptr;  // x as s[d], or null
  int64_t c = 0, d = 0;
};

bool as_conversion(const Stmt& s, Conversion* out) {
  auto* st = s.as<BufferStoreNode>();
  if (!st || st->buffer->scope != Scope::Local || st->indices.size() != 1 || st->value.dtype().lanes != 1) {
    return false;
  }
  auto* cast = st->value.as<CastNode>();
  const int64_t* c = as_const_int(st->indices[0]);
  if (!cast || !c || cast->value.dtype().lanes != 1) return false;
  *out = {st, cast, nullptr, *c, 0};
  auto* ld = cast->value.as<BufferLoadNode>();
  const int64_t* d = ld && ld->buffer->scope == Scope::Local && ld->indices.size() == 1 ? as_const_int(ld->indices[0]) : nullptr;
  if (d) {
    out->load = ld;
    out->d = *d;
  }
  return true;
}

bool reads(const Expr& e, const Buffer& b) {
  bool found = false;
  post_order(make_evaluate(e), [](const Stmt&) {}, [&](const Expr& x) {
    if (auto* ld = x.as<BufferLoadNode>()) found |= ld->buffer == b;
  });
  return found;
}

bool reads_memory(const Expr& e) {
  bool found = false;
  post_order(make_evaluate(e), [](const Stmt&) {}, [&](const Expr& x) {
    found |= x.kind() == NodeKind::BufferLoad || x.kind() == NodeKind::Call;
  });
  return found;
}

// v as the 16-bit half it keeps of a 32-bit integer x: x (or x & 0xffff, x >> 0) is half
// 0, x >> 16 (or (x >> 16) & 0xffff) half 1. Null when v is neither.
Expr half_of(Expr v, int* half) {
  *half = 0;
  auto strip = [](const Expr& e, BinaryOp op, int64_t k) -> Expr {
    auto* b = e.as<BinaryNode>();
    if (!b || b->op != op) return {};
    if (is_const_int(b->b, k)) return b->a;
    if (op == BinaryOp::BitAnd && is_const_int(b->a, k)) return b->b;
    return {};
  };
  if (Expr x = strip(v, BinaryOp::BitAnd, 0xffff)) v = x;
  if (Expr x = strip(v, BinaryOp::Shr, 16)) {
    v = x;
    *half = 1;
  } else if (Expr x = strip(v, BinaryOp::Shr, 0)) {
    v = x;
  }
  DataType t = v.dtype();
  return t.is_int() && t.bits == 32 && t.lanes == 1 ? v : Expr();
}

// r[c] = reinterpret<T>(uint16(h)) (or = int16/uint16(h) when r holds them), r a register
// array of a 16-bit type and c a constant: h, or null for any other store.
Expr stored_half(const Stmt& s, const BufferStoreNode** st_out, int64_t* c_out) {
  auto* st = s.as<BufferStoreNode>();
  if (!st || st->buffer->scope != Scope::Local || st->indices.size() != 1 || st->value.dtype().lanes != 1) return {};
  const int64_t* c = as_const_int(st->indices[0]);
  DataType t = st->buffer->dtype;
  if (!c || t.bits != 16 || t.lanes != 1 || st->value.dtype() != t) return {};
  Expr v = st->value;
  if (auto* call = v.as<CallNode>(); call && call->op == "reinterpret" && call->args.size() == 1) v = call->args[0];
  auto* cast = v.as<CastNode>();
  if (!cast || !cast->dtype.is_int() || cast->dtype.bits != 16 || cast->dtype.lanes != 1) return {};
  if (v.same_as(st->value) && cast->dtype != t) return {};
  *st_out = st;
  *c_out = *c;
  return cast->value;
}

class PackCasts : public IRMutator {
 public:
  explicit PackCasts(PassContext& ctx) : ctx_(ctx), sm_(ctx.target.sm) {}
  // The pairs of registers the conversions of computed values go through.
  const std::vector<Buffer>& scratch() const { return scratch_; }

  Stmt mutate_Seq(const Stmt& self, const SeqNode* op) override {
    return rewrite_windows(*this, self, op, [this](const std::vector<Stmt>& in, size_t i, size_t* used) {
      Stmt pair = i + 1 < in.size() ? packed(in[i], in[i + 1]) : Stmt();
      if (pair) *used = 2;
      return pair;
    });
  }

 private:
  Stmt packed(const Stmt& a, const Stmt& b) {
    // Each under the same test (the slots of a partitioned loop that not every thread has):
    // one test around the pair. The test reads no memory, so the first conversion cannot
    // change it.
    auto* ia = a.as<IfThenElseNode>();
    auto* ib = b.as<IfThenElseNode>();
    if (ia && ib) {
      if (ia->else_case || ib->else_case || reads_memory(ia->cond) || !structural_equal(ia->cond, ib->cond)) return {};
      Stmt pair = packed(ia->then_case, ib->then_case);
      return pair ? make_if(ia->cond, pair, {}, ia->loc) : Stmt();
    }
    // The same value bound around each: bound once. It reads no r, so the first store cannot
    // change it.
    auto* la = a.as<LetStmtNode>();
    auto* lb = b.as<LetStmtNode>();
    if (la && lb) {
      if (!structural_equal(la->value, lb->value)) return {};
      Stmt pair = packed(la->body, substitute(lb->body, {{lb->var, la->var}}));
      auto* st = pair.as<BufferStoreNode>();
      if (!st || reads(la->value, st->buffer)) return {};
      return make_let(la->var, la->value, pair, la->loc);
    }
    if (Stmt halves = packed_halves(a, b)) return halves;
    Conversion x, y;
    if (!as_conversion(a, &x) || !as_conversion(b, &y)) return {};
    const Buffer& r = x.store->buffer;
    DataType from = x.cast->value.dtype(), to = x.cast->dtype;
    if (r != y.store->buffer || y.c != x.c + 1 || x.c % 2 || y.cast->value.dtype() != from) return {};
    if (to != r->dtype || !converts_pairs(from, to, sm_)) return {};
    // Neighbouring elements of another register array: converted where they are.
    if (x.load && y.load && x.load->buffer == y.load->buffer && x.load->buffer != r && y.d == x.d + 1 && x.d % 2 == 0) {
      Expr pair = make_cast(to.with_lanes(2), make_load(x.load->buffer, x.load->indices, x.load->loc, 2), x.cast->loc);
      return make_store(r, x.store->indices, pair, x.store->loc);
    }
    // Two values computed: into a pair of registers first. The second must not read what
    // the first conversion would have written by then.
    if (reads(y.cast->value, r)) return {};
    Buffer tmp = scratch(from);
    Expr pair = make_cast(to.with_lanes(2), make_load(tmp, {make_int(0)}, x.cast->loc, 2), x.cast->loc);
    return make_seq({make_store(tmp, {make_int(0)}, x.cast->value, x.store->loc),
                     make_store(tmp, {make_int(1)}, y.cast->value, y.store->loc),
                     make_store(r, x.store->indices, pair, x.store->loc)},
                    x.store->loc);
  }

  // r[c] and r[c + 1] the two halves of one 32-bit x (see the file's notes): one store.
  Stmt packed_halves(const Stmt& a, const Stmt& b) {
    const BufferStoreNode *sa = nullptr, *sb = nullptr;
    int64_t ca = 0, cb = 0;
    Expr ha = stored_half(a, &sa, &ca), hb = stored_half(b, &sb, &cb);
    if (!ha || !hb || sa->buffer != sb->buffer || cb != ca + 1 || ca % 2) return {};
    int half_a = 0, half_b = 0;
    Expr xa = half_of(ha, &half_a), xb = half_of(hb, &half_b);
    if (!xa || !xb || half_a != 0 || half_b != 1 || !structural_equal(xa, xb) || reads(xa, sa->buffer)) return {};
    const Buffer& r = sa->buffer;
    return make_store(r, sa->indices, make_call("reinterpret", {xa}, r->dtype.with_lanes(2), sa->loc), sa->loc);
  }

  // One pair of registers per source type, shared by every conversion that needs one.
  Buffer scratch(DataType t) {
    for (auto& b : scratch_) {
      if (b->dtype == t) return b;
    }
    scratch_.push_back(make_buffer(ctx_.fresh_name("pair"), Scope::Local, t, {make_int(2)}));
    return scratch_.back();
  }

  PassContext& ctx_;
  int sm_;
  std::vector<Buffer> scratch_;
};

}  // namespace

void pack_casts(Kernel& k, PassContext& ctx) {
  if (ctx.options.disable_vectorize) return;
  PackCasts p(ctx);
  k.body = p.mutate(k.body);
  k.allocs.insert(k.allocs.end(), p.scratch().begin(), p.scratch().end());
}

}  // namespace tegula::transform
