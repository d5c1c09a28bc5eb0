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
